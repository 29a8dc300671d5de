package layout_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLayoutRules: the rules TestLayout applies, on imports and names made up for the test,
// so that a rule cannot silently stop matching.
func TestLayoutRules(t *testing.T) {
	cases := []struct {
		rel    string
		test   bool
		im     imported
		reject bool
	}{
		{"adapters/kafka", false, imported{path: "github.com/IBM/sarama"}, false},
		{"adapters/kafka/internal/kafkarecords", false, imported{path: "github.com/IBM/sarama"}, false},
		{"adapters/redisstream", true, imported{path: "github.com/IBM/sarama"}, true},
		{"adapters/amqp", true, imported{path: "github.com/redis/go-redis/v9"}, true},
		{"adapters/sqs", false, imported{path: "github.com/aws/aws-sdk-go-v2/service/sqs"}, false},
		{"cmd/millrace", true, imported{path: "github.com/aws/aws-sdk-go-v2/service/sqs/types"}, true},
		{"cmd/millrace", false, imported{path: "github.com/rabbitmq/amqp091-go"}, true},
		{"conformance", false, imported{path: "github.com/twmb/franz-go/pkg/kgo"}, true},
		{"internal/testenv", false, imported{path: "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"}, true},
		{"deadletter/sink", true, imported{path: "github.com/ThreeDotsLabs/watermill-aws/sqs"}, true},
		{"idempotency", false, imported{path: "github.com/redis/go-redis/v9"}, false},
		{"idempotency/internal/testenv", false, imported{path: "github.com/redis/go-redis/v9"}, false},
		{"internal/redisguard", false, imported{path: "github.com/redis/go-redis/v9"}, false},
		{"internal/redisslot", false, imported{path: "github.com/redis/go-redis/v9"}, true},
		{"idempotencyx", false, imported{path: "github.com/redis/go-redis/v9"}, true},
		{"deadletter/pgstore", false, imported{path: "github.com/jackc/pgx/v5/pgxpool"}, false},
		{"deadletter/pgstore/pgtest", false, imported{path: "github.com/jackc/pgx/v5/pgxpool"}, false},
		{"deadletter/sink", true, imported{path: "github.com/jackc/pgx/v5/pgxpool"}, false},
		{"cmd/millrace", false, imported{path: "github.com/jackc/pgx/v5"}, true},
		{"cmd/millrace", false, imported{name: "_", path: module + "/adapters/kafka"}, false},
		{"cmd/millrace", true, imported{path: module + "/adapters/memory"}, false},
		{"cmd/millrace", false, imported{path: module + "/adapters/kafka"}, true},
		{"adapters/kafka", true, imported{path: module + "/adapters/sqs"}, true},
		{"adapters/kafka", true, imported{path: module + "/adapters/kafka/internal/kafkarecords"}, false},
		{"deadletter/sink", true, imported{path: module + "/adapters/redisstream"}, true},
		{"deadletter/sink", true, imported{path: module + "/adapters/memory"}, false},
		{"router", false, imported{path: "github.com/ThreeDotsLabs/watermill/message"}, false},
		{"router", false, imported{path: "github.com/IBM/saramax"}, false},
	}
	for _, c := range cases {
		v := check(c.rel, c.test, c.im)
		if (v != "") != c.reject {
			t.Errorf("%s (test %v) importing %s %q: violation %q, want one: %v", c.rel, c.test, c.im.name, c.im.path, v, c.reject)
		}
	}

	root := t.TempDir()
	for _, f := range []string{"cmd/millrace/app.go", "cmd/millrace/redis_test.go", "cmd/millrace/testdata/RabbitMQ.json",
		"cmd/millrace/testdata/nats/x.txt", "cmd/millrace/broker_e2e_test.go", "cmd/other/kafka.go"} {
		p := filepath.Join(root, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, v := range brokerNamedFiles(t, root, "cmd/millrace") {
		got = append(got, strings.Fields(v)[0])
	}
	want := []string{"cmd/millrace/redis_test.go", "cmd/millrace/testdata/RabbitMQ.json", "cmd/millrace/testdata/nats"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("broker-named files %q, want %q", got, want)
	}
}
