package redisstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/internal/clitest"
)

// The CLI tests of this file run the millrace command, built once for this test process.
func TestMain(m *testing.M) { os.Exit(clitest.Main(m)) }

// cliPolicy and cliBudget are the router settings of the CLI tests.
var (
	cliPolicy = millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(100 * time.Millisecond)}
	cliBudget = 200 * time.Millisecond
)

// cliAdapter returns a client, a unique stream and an adapter for it with quick reclaims; the
// stream and its dead-letter stream are deleted at cleanup.
func cliAdapter(t *testing.T) (*redis.Client, string, *redisstream.Adapter) {
	t.Helper()
	c := client(t)
	stream := fmt.Sprintf("millrace-test.cli.%08x", rand.Uint32())
	a, err := redisstream.New(redisstream.Config{
		URL: redisURL(), Group: "millrace-test", ProcessingBudget: cliBudget,
		ReclaimInterval: 50 * time.Millisecond, ReadBlock: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.Close()
		c.Del(context.Background(), stream, a.DeadLetterTopic(stream))
	})
	return c, stream, a
}

// TestCLIEndToEndRedisDeadLetterStream: the message exhausts into the Redis dead-letter
// stream; `dlq list --json` reads it there, `dlq show` prints it, a replay to a stream that
// does not exist is refused before anything changes, `dlq replay` puts it back on its stream,
// the healthy handler processes it, and the dead-letter stream is empty.
func TestCLIEndToEndRedisDeadLetterStream(t *testing.T) {
	rc, stream, a := cliAdapter(t)
	h := clitest.FailingRouter(t, a, stream, cliPolicy, cliBudget)
	payload := []byte(`{"payment":9,"note":"naïve ✓"}`)
	if err := a.Publisher().Publish(stream, message.NewMessage("uuid-redis-e2e", payload)); err != nil {
		t.Fatal(err)
	}
	dlq := a.DeadLetterTopic(stream)
	clitest.BrokerDLQRoundTrip(t, h, redisURL(),
		clitest.DeadLetter{Topic: stream, UUID: "uuid-redis-e2e", Payload: payload, Broker: redisstream.BrokerName, Attempts: 2},
		func() int { return int(rc.XLen(context.Background(), dlq).Val()) })

	// A replay target that does not exist on Redis is refused before anything changes.
	ds, err := redisstream.NewDeadLetterStore(rc, dlq)
	if err != nil {
		t.Fatal(err)
	}
	clitest.Put(t, ds, clitest.Sample(1, stream))
	r := clitest.New(t).Run("", "dlq", "replay", "--store", redisURL(), "--topic", stream, "--reset-history", "--to-topic", stream+".missing")
	if n := rc.XLen(context.Background(), dlq).Val(); r.Code != 1 || !strings.Contains(r.Stderr, "does not exist") || n != 1 {
		t.Fatalf("replay to a missing stream: exit %d, stderr %q, dlq len %d", r.Code, r.Stderr, n)
	}
}

// TestCLIEndToEndTableStoreOverRedis: the table store with a real broker: the sink writes the
// dead letter to PostgreSQL (and nothing to the Redis dead-letter stream), `dlq replay
// --broker redis://` puts it back on the stream.
func TestCLIEndToEndTableStoreOverRedis(t *testing.T) {
	rc, stream, a := cliAdapter(t)
	clitest.TableRoundTrip(t, a, redisURL(), cliPolicy, cliBudget,
		clitest.DeadLetter{Topic: stream, UUID: "uuid-table-redis", Payload: []byte(`{"n":1}`), Broker: redisstream.BrokerName, Attempts: 2})
	if n := rc.XLen(context.Background(), a.DeadLetterTopic(stream)).Val(); n != 0 {
		t.Fatalf("the StoreOnly sink also wrote %d entries to the Redis dead-letter stream", n)
	}
}

// TestCLIRedisForeignEntryShownAndReplayedExactly is defect 7 (issue 12) through the CLI: a
// foreign entry (user=u-5, event=legacy, a repeated name and a binary value) is dead-lettered
// as malformed. `dlq show` used to print "Payload (0 bytes)" and "Metadata (0)", and `dlq
// replay --reason malformed --reset-history` published an empty payload and deleted the dead
// letter. Now show prints every field raw, in order, and a replay to Redis appends exactly the
// original fields and only then deletes the dead letter. (That a broker which cannot
// re-publish the fields exactly refuses and keeps the record is
// TestCLIRefusesRedisFieldsOnRabbitMQ in adapters/amqp.)
func TestCLIRedisForeignEntryShownAndReplayedExactly(t *testing.T) {
	rc, stream, a := cliAdapter(t)
	clitest.FailingRouter(t, a, stream, cliPolicy, cliBudget)
	ctx := context.Background()
	foreign := []string{"user", "u-5", "event", "legacy", "user", "u-6", "blob", "\x00\xff"}
	if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: foreign}).Err(); err != nil {
		t.Fatal(err)
	}
	dlq := a.DeadLetterTopic(stream)
	clitest.WaitUntil(t, "the foreign entry's dead letter", func() bool { return rc.XLen(ctx, dlq).Val() == 1 })

	c := clitest.New(t)
	out := c.ListJSON("--store", redisURL(), "--topic", stream, "--reason", "malformed")
	if out.Total != 1 || len(out.Entries) != 1 {
		t.Fatalf("list: %+v", out)
	}
	id := out.Entries[0].ID
	show := c.OK("dlq", "show", id, "--store", redisURL(), "--topic", stream)
	for _, want := range []string{"Native fields (4, in broker order", "  1. user = u-5\n", "  2. event = legacy\n",
		"  3. user = u-6\n", `  4. blob = "\x00\xff" (quoted)` + "\n"} {
		if !strings.Contains(show, want) {
			t.Errorf("show lacks %q:\n%s", want, show)
		}
	}
	if strings.Contains(show, "Payload (0 bytes)") {
		t.Errorf("show prints an empty payload for native content:\n%s", show)
	}
	js := c.ShowJSON(id, "--store", redisURL(), "--topic", stream)
	if len(js.Native) != 4 || string(js.Native[3].Value) != "\x00\xff" || js.Native[2].Name != "user" ||
		js.Native[2].ValueText == nil || *js.Native[2].ValueText != "u-6" {
		t.Fatalf("show --json native: %+v", js.Native)
	}

	// Redis re-publishes the fields exactly (to a stream no router consumes, to compare them).
	target := stream + ".replayed"
	if err := rc.XGroupCreateMkStream(ctx, target, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Del(context.Background(), target) })
	c.OK("dlq", "replay", "--store", redisURL(), "--topic", stream, "--reason", "malformed", "--reset-history", "--to-topic", target)
	v, err := rc.Do(ctx, "XRANGE", target, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.ParseEntries(v)
	if err != nil || len(got) != 1 || !slices.Equal(got[0].Fields, foreign) {
		t.Fatalf("replayed entry %q (%v), want exactly %q", got, err, foreign)
	}
	if n := rc.XLen(ctx, dlq).Val(); n != 0 {
		t.Fatalf("%d dead letters after the exact replay, want 0", n)
	}
}

// TestCLITopicsRedis: `millrace dlq topics` lists a dead-letter stream with its length and the
// stream it belongs to, and not a key named like one that is not a stream.
func TestCLITopicsRedis(t *testing.T) {
	rc, stream, a := cliAdapter(t)
	ctx := context.Background()
	dlq := a.DeadLetterTopic(stream)
	ds, err := redisstream.NewDeadLetterStore(rc, dlq)
	if err != nil {
		t.Fatal(err)
	}
	clitest.Put(t, ds, clitest.Sample(1, stream))
	clitest.Put(t, ds, clitest.Sample(2, stream))
	notStream := stream + ".other.dlq"
	rc.Set(ctx, notStream, "x", time.Minute)
	t.Cleanup(func() { rc.Del(context.Background(), notStream) })
	var got struct {
		Destinations []struct {
			Name, Topic string
			Depth       int64
		}
	}
	if err := json.Unmarshal([]byte(clitest.New(t).OK("dlq", "topics", "--store", redisURL(), "--json")), &got); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, d := range got.Destinations {
		switch d.Name {
		case dlq:
			found++
			if d.Topic != stream || d.Depth != 2 {
				t.Errorf("dlq topics: %+v, want topic %s, depth 2", d, stream)
			}
		case notStream:
			t.Errorf("dlq topics lists %s, a string key", notStream)
		}
	}
	if found != 1 {
		t.Errorf("dlq topics lists %s %d times, want once: %+v", dlq, found, got.Destinations)
	}
}
