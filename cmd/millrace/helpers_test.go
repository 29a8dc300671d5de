package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
)

// memBroker lets the CLI publish into an in-process memory adapter: the registry entry tests
// inject under the scheme mem://. Topics exist when the test declares them.
type memBroker struct {
	a      *memory.Adapter
	mu     sync.Mutex
	topics map[string]bool
	// failAfter, when positive, makes publish number failAfter+1 and later fail.
	failAfter int64
	// onPublish, when set, is called after each successful publish with the running count.
	onPublish func(n int64)
	published atomic.Int64
	// destinations and destErr are what DeadLetterDestinations returns.
	destinations []brokerurl.Destination
	destErr      error
	// check is CheckReplay of the same broker opened as memcheck:// (checkingBroker).
	check func(topic string, msg *message.Message) error
}

// checkingBroker is memBroker with brokerurl.ReplayChecker, as memcheck://.
type checkingBroker struct{ *memBroker }

func (b checkingBroker) CheckReplay(_ context.Context, topic string, _ deadletter.Record, msg *message.Message) error {
	if b.check == nil {
		return nil
	}
	return b.check(topic, msg)
}

// memAdapter is the memory adapter with memBroker's publisher.
type memAdapter struct {
	*memory.Adapter
	b *memBroker
}

func (m memAdapter) Publisher() message.Publisher { return m.b }

func (b *memBroker) Adapter() millrace.Adapter                         { return memAdapter{Adapter: b.a, b: b} }
func (b *memBroker) PrepareReplay(deadletter.Record, *message.Message) {}
func (b *memBroker) DeadLetterDestinations(context.Context) ([]brokerurl.Destination, error) {
	return b.destinations, b.destErr
}
func (b *memBroker) Publish(topic string, msgs ...*message.Message) error {
	if b.failAfter > 0 && b.published.Load() >= b.failAfter {
		return errors.New("injected publish failure")
	}
	if err := b.a.Publish(topic, msgs...); err != nil {
		return err
	}
	n := b.published.Add(int64(len(msgs)))
	if b.onPublish != nil {
		b.onPublish(n)
	}
	return nil
}
func (b *memBroker) Close() error { return nil }
func (b *memBroker) TopicExists(_ context.Context, t string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.topics[t], nil
}
func (b *memBroker) DeadLetters(context.Context, string) (deadletter.Store, error) {
	return nil, errors.New("the memory broker keeps no dead-letter store")
}

func newMemBroker(t *testing.T, topics ...string) *memBroker {
	t.Helper()
	a, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b := &memBroker{a: a, topics: map[string]bool{}}
	for _, tp := range topics {
		b.topics[tp] = true
	}
	return b
}

// cli is an app wired to one test's table and broker.
type cli struct {
	t     *testing.T
	app   *app
	table string
	tty   bool
}

func newCLI(t *testing.T, table string, b *memBroker) *cli {
	c := &cli{t: t, table: table}
	mux := brokerurl.DefaultMux().Clone()
	mux.Register(testDriver{scheme: "mem", open: func(context.Context, *url.URL) (brokerurl.Broker, error) { return b, nil }})
	mux.Register(testDriver{scheme: "memcheck", open: func(context.Context, *url.URL) (brokerurl.Broker, error) { return checkingBroker{b}, nil }})
	// down:// dials a port where nothing listens, as a broker that is not running.
	mux.Register(testDriver{scheme: "down", open: func(ctx context.Context, u *url.URL) (brokerurl.Broker, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", "127.0.0.1:1")
		if err == nil {
			_ = conn.Close()
			return nil, errors.New("127.0.0.1:1 unexpectedly accepted a connection")
		}
		return nil, err
	}})
	c.app = &app{
		mux:        mux,
		getenv:     envWith(table),
		isTerminal: func(io.Writer) bool { return c.tty },
		now:        time.Now,
	}
	return c
}

// testDriver opens one scheme with a function of the test's.
type testDriver struct {
	scheme string
	open   func(context.Context, *url.URL) (brokerurl.Broker, error)
}

func (d testDriver) Schemes() []string { return []string{d.scheme} }
func (d testDriver) Open(ctx context.Context, u *url.URL, _ brokerurl.Options) (brokerurl.Broker, error) {
	return d.open(ctx, u)
}
func (d testDriver) OpenAdapter(ctx context.Context, u *url.URL, _ brokerurl.Options) (millrace.Adapter, error) {
	b, err := d.open(ctx, u)
	if err != nil {
		return nil, err
	}
	return b.Adapter(), nil
}

type result struct {
	code           int
	stdout, stderr string
}

func (c *cli) run(stdin string, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	code := c.app.run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// ok runs args and fails the test unless they exit 0.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run("", args...)
	if r.code != 0 {
		c.t.Fatalf("millrace %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

type listOutput struct {
	Total   int64       `json:"total"`
	Next    string      `json:"next"`
	Entries []entryJSON `json:"entries"`
}

func (c *cli) listJSON(args ...string) listOutput {
	c.t.Helper()
	var out listOutput
	s := c.ok(append([]string{"dlq", "list", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		c.t.Fatalf("list --json output is not JSON: %v\n%s", err, s)
	}
	return out
}

// newTable returns a migrated table store of its own.
func newTable(t *testing.T) *pgstore.Store {
	return pgtest.Store(t, pgtest.Pool(t))
}

func count(t *testing.T, s deadletter.Store) int64 {
	t.Helper()
	n, err := s.Count(context.Background(), deadletter.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// drain reads every message of topic until quiet passes without one, acking each.
func drain(t *testing.T, a *memory.Adapter, topic string, quiet time.Duration) []*message.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := a.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []*message.Message
	for {
		select {
		case m := <-ch:
			out = append(out, m)
			m.Ack()
		case <-time.After(quiet):
			return out
		}
	}
}

func tableName(s *pgstore.Store) string {
	// Table() is `"public"."name"`; the CLI takes the bare name.
	q := s.Table()
	return strings.Trim(q[strings.LastIndex(q, ".")+1:], `"`)
}

func envWith(table string) func(string) string {
	env := map[string]string{"MILLRACE_STORE": pgtest.URL(), "MILLRACE_TABLE": table}
	return func(k string) string { return env[k] }
}

var sampleBase = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

func sample(i int, topic string) deadletter.Record {
	return deadletter.Record{
		UUID: "uuid-" + itoa(i), Payload: []byte(`{"n":` + itoa(i) + `}`),
		Metadata: map[string]string{"x-trace": "t" + itoa(i)}, Reason: deadletter.Exhausted, Attempts: 3,
		LastError: "boom", OriginalTopic: topic, Broker: "memory", Handler: "h",
		FirstFailureAt: sampleBase.Add(time.Duration(i) * time.Second), LastFailureAt: sampleBase.Add(time.Duration(i) * time.Second),
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func put(t *testing.T, s deadletter.Store, rec deadletter.Record) string {
	t.Helper()
	id, err := s.Put(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func pgtestPool(t *testing.T) *pgxpool.Pool { return pgtest.Pool(t) }
