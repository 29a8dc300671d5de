package nats

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace/internal/testenv"
)

// envURL names the environment variable that points the tests at another NATS server.
const envURL = "MILLRACE_NATS_URL"

func natsURL() string { return testenv.Getenv(envURL, DefaultURL) }

// testConn returns a connection to the test server with JetStream enabled, or skips (fails in
// CI) when it is unreachable.
func testConn(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second), nats.MaxReconnects(0))
	if err != nil {
		testenv.Unreachable(tb, "NATS", natsURL(), envURL, err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = js.AccountInfo(ctx)
		cancel()
	}
	if err != nil {
		nc.Close()
		testenv.Unreachable(tb, "NATS JetStream", natsURL(), envURL, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// testConfig is a configuration with test timings: AckWait 3 s, budget 1 s, NackDelay 100 ms.
func testConfig() Config {
	return Config{
		URL:              natsURL(),
		Durable:          "millrace-test",
		AckWait:          3 * time.Second,
		ProcessingBudget: time.Second,
		NackDelay:        100 * time.Millisecond,
	}
}

// newTestAdapter returns an adapter on the test server; the streams it created or used (and
// their dead-letter streams) are deleted when the test ends, after the adapter is closed.
func newTestAdapter(tb testing.TB, cfg Config) *Adapter {
	tb.Helper()
	nc := testConn(tb)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	a, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		subjects := a.knownSubjects()
		_ = a.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range subjects {
			_ = js.DeleteStream(ctx, a.cfg.StreamName(s))
			_ = js.DeleteStream(ctx, a.cfg.StreamName(a.DeadLetterTopic(s)))
		}
	})
	return a
}

// knownSubjects lists the subjects whose streams the adapter created or used.
func (a *Adapter) knownSubjects() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.streams))
	for s := range a.streams {
		out = append(out, s)
	}
	return out
}

// uniqueSubject returns a subject unique to the test.
func uniqueSubject(tb testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-", ".", "-").Replace(tb.Name())
	return fmt.Sprintf("millrace-test.%s.%08x", strings.ToLower(name), rand.Uint32())
}

// logBuf is a log destination safe for concurrent writes, for tests that read the logs.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// bufLogger logs at Debug and above to buf and to the test's output.
func bufLogger(tb testing.TB, buf *logBuf) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(buf, tb.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
