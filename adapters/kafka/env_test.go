package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/internal/testenv"
)

// brokersEnv points the tests at a Kafka cluster; `source .ci/services/kafka.sh` starts a
// Kafka-protocol broker (kfake) at the default address and exports it.
const brokersEnv = "MILLRACE_KAFKA_BROKERS"

const defaultBrokers = "127.0.0.1:19092"

// brokers returns the brokers to test against, or skips (fails in CI) when none answers.
func brokers(t testing.TB) []string {
	t.Helper()
	raw := testenv.Getenv(brokersEnv, defaultBrokers)
	list := strings.Split(raw, ",")
	conn, err := net.DialTimeout("tcp", list[0], 2*time.Second)
	if err != nil {
		testenv.Unreachable(t, "Kafka", raw, brokersEnv,
			fmt.Errorf("%w; start a local broker with `source .ci/services/kafka.sh`", err))
	}
	_ = conn.Close()
	return list
}

// uniqueName returns a topic or group name unique to this test run.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s.%08x", prefix, rand.Uint32())
}

// testLogger writes the adapter's logs to the test output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// newAdapter connects an adapter in group (a fresh group when empty) and closes it with t.
func newAdapter(t testing.TB, group string, tweak func(*kafka.Config)) *kafka.Adapter {
	t.Helper()
	if group == "" {
		group = uniqueName("millrace-test")
	}
	cfg := kafka.Config{Brokers: brokers(t), ConsumerGroup: group, Logger: testLogger(t)}
	if tweak != nil {
		tweak(&cfg)
	}
	a, err := kafka.New(cfg)
	if errors.Is(err, millrace.ErrInvalidConfig) {
		t.Fatalf("kafka.New: %v", err)
	}
	if err != nil {
		testenv.Unreachable(t, "Kafka", strings.Join(cfg.Brokers, ","), brokersEnv, err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// ctxT returns a context bounded by d and cancelled with t.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
