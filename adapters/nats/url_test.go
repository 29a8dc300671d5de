package nats

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestURLParameters: every parameter reaches its Config field; the URL keeps the user and host.
func TestURLParameters(t *testing.T) {
	u := mustURL(t, "nats://me:secret@127.0.0.1:4222?durable=billing&ack_wait=40s&processing_budget=15s&max_deliver=9&max_ack_pending=500&window=8&nack_delay=2s")
	cfg, err := configFromURL(u, brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{URL: "nats://me:secret@127.0.0.1:4222", Durable: "billing", AckWait: 40 * time.Second, ProcessingBudget: 15 * time.Second,
		MaxDeliver: 9, MaxAckPending: 500, Window: 8, NackDelay: 2 * time.Second}
	got := cfg
	got.Logger, got.StreamName = nil, nil
	if cfg.Logger == nil || cfg.StreamName != nil {
		t.Errorf("Logger %v (want the discard logger), StreamName set %v (want the default)", cfg.Logger, cfg.StreamName != nil)
	}
	if got.URL != want.URL || got.Durable != want.Durable || got.AckWait != want.AckWait || got.ProcessingBudget != want.ProcessingBudget ||
		got.MaxDeliver != want.MaxDeliver || got.MaxAckPending != want.MaxAckPending || got.Window != want.Window || got.NackDelay != want.NackDelay {
		t.Fatalf("config %+v, want %+v", got, want)
	}
}

// TestURLRefusals: unknown parameters are named, a missing durable and bad values are refused
// naming the parameter and the rule.
func TestURLRefusals(t *testing.T) {
	cases := []struct {
		url  string
		opts brokerurl.Options
		want string
		is   error
	}{
		{"nats://h:4222?durable=d&windw=3", brokerurl.Options{}, "does not take windw; did you mean window?", brokerurl.ErrUnknownParameter},
		{"nats://h:4222", brokerurl.Options{}, "needs parameter durable", brokerurl.ErrInvalidURL},
		{"nats://h:4222?durable=d&window=x", brokerurl.Options{}, `parameter window="x"`, brokerurl.ErrInvalidURL},
		{"nats://h:4222?durable=d&window=1099511627776", brokerurl.Options{}, `parameter window="1099511627776" (nats.Config.Window) must be at most 4096`, brokerurl.ErrInvalidURL},
		{"nats://h:4222?durable=d&ack_wait=10s&processing_budget=10s", brokerurl.Options{}, `parameter processing_budget="10s" (nats.Config.ProcessingBudget) must be below half of AckWait (10s)`, brokerurl.ErrInvalidURL},
		{"nats://h:4222?durable=a.b", brokerurl.Options{}, `parameter durable="a.b"`, brokerurl.ErrInvalidURL},
		{"nats://h:4222?durable=d&max_deliver=1", brokerurl.Options{}, `parameter max_deliver="1"`, brokerurl.ErrInvalidURL},
		{"nats://h:4222/x?durable=d", brokerurl.Options{}, "takes no path", brokerurl.ErrInvalidURL},
		{"nats://h:4222?durable=d#f", brokerurl.Options{}, "takes no fragment", brokerurl.ErrInvalidURL},
	}
	for _, c := range cases {
		_, err := configFromURL(mustURL(t, c.url), c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.is) {
			t.Errorf("%s: error %v, want one containing %q and wrapping %v", c.url, err, c.want, c.is)
		}
	}
	if cfg, err := configFromURL(mustURL(t, "nats://h:4222"), brokerurl.Options{NoConsume: true}); err != nil || cfg.Durable == "" {
		t.Errorf("NoConsume without durable: %+v, %v", cfg, err)
	}
}

// TestURLBroker: opened by URL through brokerurl, the broker finds provisioned topics and their
// dead-letter streams, names a missing one in the common words, and replays native content
// exactly.
func TestURLBroker(t *testing.T) {
	testConn(t)
	ctx := context.Background()
	a := newTestAdapter(t, testConfig())
	topic := uniqueSubject(t)
	if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	b, err := brokerurl.OpenBroker(ctx, natsURL()+"?durable=millrace-test", brokerurl.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	if ok, err := b.TopicExists(ctx, topic); !ok || err != nil {
		t.Errorf("TopicExists(%s) = %v, %v", topic, ok, err)
	}
	if ok, err := b.TopicExists(ctx, topic+".missing"); ok || err != nil {
		t.Errorf("TopicExists(missing) = %v, %v", ok, err)
	}
	if err := b.Adapter().Publisher().Publish(a.DeadLetterTopic(topic), deadletter.Record{UUID: "u", Payload: []byte("p"), Reason: deadletter.Exhausted, Attempts: 1}.Message()); err != nil {
		t.Fatal(err)
	}
	dests, err := b.DeadLetterDestinations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range dests {
		if d.Name == a.DeadLetterTopic(topic) {
			found = d.Topic == topic && d.Depth == 1
		}
	}
	if !found {
		t.Errorf("DeadLetterDestinations has no %s with topic %s and depth 1: %+v", a.DeadLetterTopic(topic), topic, dests)
	}
	s, err := b.DeadLetters(ctx, a.DeadLetterTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Count(ctx, deadletter.Filter{}); n != 1 || err != nil {
		t.Errorf("Count = %d, %v", n, err)
	}
	missing := topic + ".none.dlq"
	_, err = b.DeadLetters(ctx, missing)
	if !errors.Is(err, deadletter.ErrDestinationNotFound) || !strings.HasPrefix(err.Error(), `dead-letter stream "`+missing+`" does not exist`) {
		t.Errorf("DeadLetters(missing): %v", err)
	}

	// Native replay: a repeated header arrives as it was published.
	np := b.(deadletter.NativePublisher)
	native := []deadletter.Field{{Name: "x-trace", Value: []byte("a")}, {Name: "x-trace", Value: []byte("b")}}
	if err := np.PublishNative(ctx, topic, deadletter.Record{Payload: []byte("\x00raw"), Native: native}); err != nil {
		t.Fatal(err)
	}
	st, err := a.js.Stream(ctx, a.cfg.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "\x00raw" || strings.Join(m.Header.Values("x-trace"), ",") != "a,b" || len(m.Header) != 1 {
		t.Errorf("replayed %q with headers %v", m.Data, m.Header)
	}
	if err := np.PublishNative(ctx, topic, deadletter.Record{Native: []deadletter.Field{{Name: "k", Type: "int", Value: []byte("1")}}}); !errors.Is(err, deadletter.ErrNotReplayable) {
		t.Errorf("typed native field: %v, want ErrNotReplayable", err)
	}
}

// TestURLUnreachable: a server that does not answer is named once, without its password.
func TestURLUnreachable(t *testing.T) {
	_, err := brokerurl.OpenBroker(context.Background(), "nats://me:hunter2@127.0.0.1:1?durable=d", brokerurl.Options{})
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Count(err.Error(), "127.0.0.1:1") != 1 {
		t.Fatalf("error %v: want one naming the URL once, without the password", err)
	}
}
