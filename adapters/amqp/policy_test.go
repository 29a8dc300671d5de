package amqp_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// TestQuorumDeliveryLimitRefusesPolicy: on quorum queues a policy with more attempts than the
// delivery limit is refused by router.New and by Provision; classic queues have no limit.
func TestQuorumDeliveryLimitRefusesPolicy(t *testing.T) {
	ctx := context.Background()
	q := newAdapter(ctx, t, amqp.Config{QueueType: amqp.Quorum, DeliveryLimit: 5})
	if got := q.Capabilities().DeliveryLimit; got != 5 {
		t.Fatalf("quorum DeliveryLimit %d, want 5", got)
	}
	tooMany := millrace.RetryPolicy{MaxAttempts: 6, Backoff: millrace.Fixed(time.Second)}
	_, err := router.New(router.Config{Adapter: q, Policy: tooMany})
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || !strings.Contains(err.Error(), "RetryPolicy.MaxAttempts") || !strings.Contains(err.Error(), "5") {
		t.Fatalf("router.New with 6 attempts over limit 5: %v", err)
	}
	if err := q.Provision(ctx, uniqueTopic("limit"), tooMany); !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
		t.Fatalf("Provision with 6 attempts over limit 5: %v", err)
	}
	if _, err := router.New(router.Config{Adapter: q, Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)}}); err != nil {
		t.Fatalf("5 attempts within limit 5 refused: %v", err)
	}
	if got := newAdapter(ctx, t, amqp.Config{QueueType: amqp.Quorum}).Capabilities().DeliveryLimit; got != amqp.DefaultDeliveryLimit {
		t.Fatalf("default quorum DeliveryLimit %d, want %d", got, amqp.DefaultDeliveryLimit)
	}
	c := newAdapter(ctx, t, amqp.Config{})
	if _, err := router.New(router.Config{Adapter: c, Policy: millrace.RetryPolicy{MaxAttempts: 50, Backoff: millrace.Fixed(time.Second)}}); err != nil {
		t.Fatalf("classic queue refused 50 attempts: %v", err)
	}
	jitter := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: 4 * time.Second, Jitter: 0.2}}
	if _, err := router.New(router.Config{Adapter: c, Policy: jitter}); !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
		t.Fatalf("jittered backoff on fixed tiers: %v", err)
	}
	if _, err := router.New(router.Config{Adapter: c, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(1500 * time.Microsecond)}}); !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
		t.Fatalf("sub-millisecond delay: %v", err)
	}
}

// TestChangedFirstDelayIsMismatch: the first-delay tier's TTL cannot change in place; Provision
// says so with ErrTopologyMismatch instead of silently keeping the old delay.
func TestChangedFirstDelayIsMismatch(t *testing.T) {
	ctx := context.Background()
	a := newAdapter(ctx, t, amqp.Config{})
	topic := uniqueTopic("mismatch")
	if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatalf("same delays, more attempts: %v", err)
	}
	err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(2 * time.Second)})
	if !errors.Is(err, amqp.ErrTopologyMismatch) || !strings.Contains(err.Error(), topic+".retry") {
		t.Fatalf("changed first delay: %v, want ErrTopologyMismatch naming %s.retry", err, topic)
	}
}

// TestUnroutableDeadLetterIsNotAcked: when the DLQ is missing, the confirmed mandatory publish
// fails, the original stays unacknowledged and is dead-lettered once the DLQ is back. The
// handler runs once: each redelivery counts as an attempt (classic queues: the redelivered
// flag), so it is past MaxAttempts and goes straight to the dead-letter write again.
func TestUnroutableDeadLetterIsNotAcked(t *testing.T) {
	ctx := context.Background()
	topic := uniqueTopic("nodlq")
	a := newAdapter(ctx, t, amqp.Config{RequeueDelay: 100 * time.Millisecond})
	var rec recorder
	counted := &countingDeadLetters{Adapter: a}
	runRouter(t, counted, topic, millrace.RetryPolicy{MaxAttempts: 1}, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		rec.add(msg, at)
		return errors.New("always fails")
	})
	writes := &counted.unroutable // dead-letter writes refused while the DLQ is missing
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(a.DeadLetterTopic(topic), false, false, false); err != nil {
		t.Fatal(err)
	}
	msg := publishKey(t, a, topic, topic, "payload")
	waitFor(t, 30*time.Second, "repeated dead-letter writes while the DLQ is missing", func() bool { return writes.Load() >= 3 })
	if n := len(rec.snapshot()); n != 1 {
		t.Fatalf("handler called %d times while the DLQ was missing, want 1", n)
	}
	dlq := watchDLQ(t, a, topic) // re-declares the DLQ and its binding
	waitFor(t, 30*time.Second, "the dead letter", func() bool { return len(dlq()) >= 1 })
	time.Sleep(500 * time.Millisecond)
	if recs := dlq(); len(recs) != 1 || recs[0].UUID != msg.UUID || string(recs[0].Payload) != "payload" {
		t.Fatalf("dead letters %+v, want exactly the one message", recs)
	}
	n := len(rec.snapshot())
	time.Sleep(500 * time.Millisecond)
	if m := len(rec.snapshot()); m != n {
		t.Fatalf("handler called %d more times after the dead letter was written", m-n)
	}
	if d := queueDepth(t, topic); d != 0 {
		t.Fatalf("work queue holds %d messages", d)
	}
}

// countingDeadLetters counts the dead-letter writes of an adapter that failed as unroutable.
type countingDeadLetters struct {
	*amqp.Adapter
	unroutable atomic.Int32
}

func (c *countingDeadLetters) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	err := c.Adapter.DeadLetter(ctx, msg, rec)
	if errors.Is(err, amqp.ErrUnroutable) {
		c.unroutable.Add(1)
	}
	return err
}

// TestConfigValidate: bad fields are refused with the field named.
func TestConfigValidate(t *testing.T) {
	cases := map[string]amqp.Config{
		"Config.URL":                        {URL: "http://x"},
		"Config.QueueType":                  {QueueType: "stream"},
		"Config.DeliveryLimit":              {DeliveryLimit: -1},
		"Config.Prefetch":                   {Prefetch: -1},
		"Config.RequeueDelay":               {RequeueDelay: -time.Second},
		"Config.ReconnectDelay":             {ReconnectDelay: -time.Second},
		"Config.DrainTimeout":               {DrainTimeout: -time.Second},
		"Config.PublishTimeout":             {PublishTimeout: -time.Second},
		`Config.Topics["a.dlq"]`:            {Topics: map[string]amqp.Topic{"a.dlq": {}}},
		`Config.Topics["a"].BindingKeys[0]`: {Topics: map[string]amqp.Topic{"a": {BindingKeys: []string{""}}}},
		`Config.Topics["a"].Exchange`:       {Topics: map[string]amqp.Topic{"a": {Exchange: "amq.topic"}}},
	}
	for field, cfg := range cases {
		err := cfg.Validate()
		var ce *millrace.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, millrace.ErrInvalidConfig) || ce.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	if err := (amqp.Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	if _, err := amqp.New(context.Background(), amqp.Config{URL: "amqp://guest:secret@127.0.0.1:5672/", QueueType: "x"}); !errors.Is(err, millrace.ErrInvalidConfig) {
		t.Errorf("New with a bad config: %v", err)
	}
}
