package kafka_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
)

// With several distinct delays every delay gets its own retry topic, so a short retry never
// queues behind a long one; RetryAfter rounds up to the next tier and is capped at the largest.
func TestDelayTiers(t *testing.T) {
	t.Parallel()
	const short, long = 300 * time.Millisecond, 3 * time.Second
	topic := uniqueName("tiers")
	a := newAdapter(t, "", nil)
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{short, long}}
	rec := newRecorder()
	slowMsg, fastMsg := newMessage(`{"slow":1}`), newMessage(`{"fast":1}`)
	slow, fast := slowMsg.UUID, fastMsg.UUID
	startRouter(t, a, topic, policy, rec, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		switch {
		case msg.UUID == slow && at.Number == 1:
			return millrace.RetryAfter(errors.New("asked for an hour"), time.Hour) // capped at the 3 s tier
		case msg.UUID == fast && at.Number == 1:
			return errors.New("policy delay: the 300ms tier")
		}
		return nil
	})
	if err := a.Publisher().Publish(topic, slowMsg); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the slow message's first attempt", func(c []call) bool { return len(c) >= 1 })
	if err := a.Publisher().Publish(topic, fastMsg); err != nil {
		t.Fatal(err)
	}
	calls := rec.wait(t, "both retried", func(c []call) bool { return len(c) >= 4 })

	byMsg := map[string][]call{}
	for _, c := range calls {
		byMsg[c.uuid] = append(byMsg[c.uuid], c)
	}
	s, f := byMsg[slow], byMsg[fast]
	if len(s) != 2 || len(f) != 2 {
		t.Fatalf("want 2 calls each, got %s", describeCalls(calls))
	}
	names := kafka.RetryTopics(topic, []time.Duration{short, long})
	if f[1].record.Topic != names[0] || s[1].record.Topic != names[1] {
		t.Fatalf("retries read from %q (fast) and %q (slow), want %q and %q", f[1].record.Topic, s[1].record.Topic, names[0], names[1])
	}
	if !f[1].start.Before(s[1].start) {
		t.Fatal("the short retry waited behind the long one")
	}
	if gap := s[1].start.Sub(s[0].end); gap < long-25*time.Millisecond || gap > long+2*time.Second {
		t.Fatalf("capped retry came after %s, want the largest tier %s", gap, long)
	}
	if gap := f[1].start.Sub(f[0].end); gap < short-25*time.Millisecond || gap > short+2*time.Second {
		t.Fatalf("short retry came after %s, want %s", gap, short)
	}
}

// A policy with more distinct delays than Config.MaxTiers is refused at start-up.
func TestTooManyTiersRefused(t *testing.T) {
	t.Parallel()
	a := newAdapter(t, "", func(c *kafka.Config) { c.MaxTiers = 2 })
	policy := millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Delays{time.Second, 2 * time.Second, 3 * time.Second}}
	err := a.Provision(ctxT(t, 10*time.Second), uniqueName("tiers"), policy)
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
		t.Fatalf("err %v, want ErrPolicyExceedsAdapter", err)
	}
}

// A RetryAfter longer than every tier of the topic is retried after the largest tier's delay
// (the documented cap), and the adapter warns that the retry comes earlier than asked.
func TestRetryAfterBeyondLargestTierWarns(t *testing.T) {
	t.Parallel()
	topic := uniqueName("cap")
	logs := &syncBuffer{}
	a := newAdapter(t, "", func(c *kafka.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	if err := a.Provision(ctxT(t, 10*time.Second), topic, policy); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	msg := newMessage("x")
	if _, err := a.ScheduleRetry(ctxT(t, 10*time.Second), msg, millrace.RetryRequest{
		Attempt: millrace.Attempt{Number: 1, OriginalTopic: topic}, Delay: time.Hour, Err: errors.New("busy"), FailedAt: failed,
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "exceeds the largest retry tier") {
		t.Fatalf("no warning that the retry comes earlier than asked; logs:\n%s", logs.String())
	}
}

// The dead-letter topic keeps its records without limit by default (a broker default of
// 7 days would delete unhandled dead letters silently), or for Config.DeadLetterRetention.
func TestDeadLetterRetention(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		retention time.Duration
		want      string
	}{{0, "-1"}, {30 * 24 * time.Hour, "2592000000"}} {
		topic := uniqueName("dlq-retention")
		a := newAdapter(t, "", func(cfg *kafka.Config) { cfg.DeadLetterRetention = c.retention })
		if err := a.Provision(ctxT(t, 10*time.Second), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		entries, err := admin(t).DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: a.DeadLetterTopic(topic)})
		if err != nil {
			t.Fatalf("describe %s: %v", a.DeadLetterTopic(topic), err)
		}
		got := ""
		for _, e := range entries {
			if e.Name == "retention.ms" {
				got = e.Value
			}
		}
		if got != c.want {
			t.Fatalf("DeadLetterRetention %s: retention.ms = %q, want %q", c.retention, got, c.want)
		}
	}
	bad := kafka.Config{Brokers: []string{"127.0.0.1:1"}, ConsumerGroup: "g", DeadLetterRetention: -time.Second}
	if err := bad.Validate(); !errors.Is(err, millrace.ErrInvalidConfig) {
		t.Fatalf("negative DeadLetterRetention: Validate() = %v, want ErrInvalidConfig", err)
	}
}
