package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/internal/testenv"
)

// The field report's verified scenarios, with its test values (5 attempts) and the delay
// shortened to 1 s (SQS's smallest), run on Kafka and on SQS with the same handler, the same
// policy and the same Redis store. Each scenario's trace (attempt numbers and outcomes, dead
// letter and give-up attempt, sends per device) must equal the expected one on both brokers.

// trace is what one message went through.
type trace struct {
	Calls        []string       // "attempt:OUTCOME" in order
	DeadLetter   string         // "reason@attempts", "" if not dead-lettered
	Sent         map[string]int // successful sends per device
	SendAttempts map[string]int // send calls per device
}

// scenario is one message of the field report's test plan.
type scenario struct {
	name     string
	body     func(run string) string
	devices  []string
	second   bool // published only after the first phase finished (the re-injected copy)
	want     trace
	terminal func(trace) bool
}

func finished(tr trace) bool {
	if tr.DeadLetter != "" {
		return true
	}
	if len(tr.Calls) == 0 {
		return false
	}
	last := tr.Calls[len(tr.Calls)-1]
	return strings.HasSuffix(last, ":SUCCESS") || strings.HasSuffix(last, ":DISCARD")
}

func notification(run, id, user string, devices []string, expires time.Time) string {
	b, _ := json.Marshal(Notification{MessageID: run + "-" + id, UserID: user, Devices: devices, Text: "Your order shipped", ExpiresAt: expires})
	return string(b)
}

func scenarios() []scenario {
	s := []scenario{
		{name: "normal", devices: []string{"normal-phone", "normal-tablet"},
			want: trace{Calls: []string{"1:SUCCESS"}, Sent: map[string]int{"normal-phone": 1, "normal-tablet": 1}}},
		{name: "reinjected-original", devices: []string{"dup-phone"},
			want: trace{Calls: []string{"1:SUCCESS"}, Sent: map[string]int{"dup-phone": 1}}},
		{name: "reinjected-copy", devices: []string{"dup-phone"}, second: true, // same messageId: no second send
			want: trace{Calls: []string{"1:SUCCESS"}, Sent: map[string]int{"dup-phone": 1}}},
		{name: "dependency-down-then-back", devices: []string{"flaky-phone"},
			want: trace{Calls: []string{"1:RETRY", "2:RETRY", "3:SUCCESS"}, Sent: map[string]int{"flaky-phone": 1}}},
		{name: "dependency-down-for-good", devices: []string{"down-phone"},
			want: trace{Calls: []string{"1:RETRY", "2:RETRY", "3:RETRY", "4:RETRY", "5:RETRY"}, DeadLetter: "exhausted@5", Sent: map[string]int{}}},
		{name: "partial-fan-out", devices: []string{"partial-phone", "partial-tablet"},
			want: trace{Calls: []string{"1:RETRY", "2:SUCCESS"}, Sent: map[string]int{"partial-phone": 1, "partial-tablet": 1},
				SendAttempts: map[string]int{"partial-phone": 1, "partial-tablet": 2}}},
		{name: "opted-out", devices: []string{"optout-phone"},
			want: trace{Calls: []string{"1:DISCARD"}, Sent: map[string]int{}}},
		{name: "expired", devices: []string{"expired-phone"},
			want: trace{Calls: []string{"1:DISCARD"}, Sent: map[string]int{}}},
		{name: "malformed-json",
			want: trace{Calls: []string{"1:MALFORMED"}, DeadLetter: "malformed@1", Sent: map[string]int{}}},
	}
	users := map[string]string{"dependency-down-then-back": "u-flaky", "dependency-down-for-good": "u-down", "opted-out": "u-optout"}
	for i := range s {
		sc := &s[i]
		user := users[sc.name]
		if user == "" {
			user = "u-ok"
		}
		id, devices, expires := sc.name, sc.devices, time.Time{}
		switch sc.name {
		case "reinjected-original", "reinjected-copy":
			id = "reinjected"
		case "expired":
			expires = time.Now().Add(-time.Hour)
		}
		if sc.name == "malformed-json" {
			sc.body = func(run string) string { return `{"messageId": "` + run + `-malformed", "devices": [` }
		} else {
			sc.body = func(run string) string { return notification(run, id, user, devices, expires) }
		}
		if sc.want.SendAttempts == nil {
			sc.want.SendAttempts = maps.Clone(sc.want.Sent)
			if sc.name == "reinjected-copy" || sc.name == "reinjected-original" {
				sc.want.SendAttempts = map[string]int{"dup-phone": 1}
			}
		}
	}
	return s
}

// fakeDirectory fails u-flaky's first two lookups, u-down's always, and opts u-optout out.
type fakeDirectory struct {
	mu    sync.Mutex
	calls map[string]int
}

func (d *fakeDirectory) OptedOut(_ context.Context, user string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[user]++
	switch {
	case user == "u-down", user == "u-flaky" && d.calls[user] <= 2:
		return false, errors.New("user directory: connection refused")
	}
	return user == "u-optout", nil
}

// fakeProvider fails partial-tablet's first send with a 503 and counts every send.
type fakeProvider struct {
	mu       sync.Mutex
	attempts map[string]int
	sent     map[string]int
}

func (p *fakeProvider) Send(_ context.Context, device, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts[device]++
	if device == "partial-tablet" && p.attempts[device] == 1 {
		return errors.New("push provider: 503 service unavailable")
	}
	p.sent[device]++
	return nil
}

func outcome(err error) string {
	if err == nil {
		return "SUCCESS"
	}
	oe := millrace.Classify(err, nil)
	if oe.Malformed {
		return "MALFORMED"
	}
	return oe.Outcome.String()
}

// parityTiming is the production timing with the field report's shortened delay: 5 attempts
// 1 s apart (window 4 s), a 3 s lease, a 2 s budget, a 3 s SQS visibility timeout.
func parityTiming() Timing {
	return Timing{
		Policy:     millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)},
		LeaseTTL:   3 * time.Second,
		Budget:     2 * time.Second,
		Visibility: 3 * time.Second,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// runScenarios runs every scenario on the broker brokerURL names and returns the traces.
func runScenarios(t *testing.T, brokerURL string, rdb *redis.Client) map[string]trace {
	run := fmt.Sprintf("parity-%08x", rand.Uint32())
	timing := parityTiming()
	timing.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	adapter, err := NewAdapter(context.Background(), brokerURL, timing)
	if err != nil {
		t.Fatalf("NewAdapter(%s): %v", brokerURL, err)
	}
	defer adapter.Close()
	store, err := idempotency.NewRedisStore(rdb, idempotency.StoreOptions{Prefix: "millrace-parity:" + run + ":notification:"})
	if err != nil {
		t.Fatal(err)
	}
	dir := &fakeDirectory{calls: map[string]int{}}
	prov := &fakeProvider{attempts: map[string]int{}, sent: map[string]int{}}

	var mu sync.Mutex
	byUUID := map[string]string{} // message UUID -> scenario
	traces := map[string]*trace{}
	observe := func(h message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error {
			err := h(msg)
			mu.Lock()
			if name, ok := byUUID[msg.UUID]; ok {
				traces[name].Calls = append(traces[name].Calls, fmt.Sprintf("%d:%s", millrace.AttemptFrom(msg).Number, outcome(err)))
			}
			mu.Unlock()
			return err
		}
	}
	topic := "push.requested." + run
	c, err := NewConsumer(adapter, timing, store, &Service{Directory: dir, Provider: prov}, topic, observe)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The topic exists before the consumer starts: messages published while it is stopped are
	// handled when it starts (the field report's "service stopped" scenario).
	if err := adapter.Provision(ctx, topic, timing.Policy); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	dlqSub := adapter.Subscriber()
	defer dlqSub.Close()
	dlq, err := dlqSub.Subscribe(ctx, adapter.DeadLetterTopic(topic))
	if err != nil {
		t.Fatalf("subscribe to dead letters: %v", err)
	}
	payloads := map[string]string{}
	go func() {
		for m := range dlq {
			rec, err := deadletter.FromMessage(m)
			mu.Lock()
			name, ok := byUUID[m.UUID]
			if ok && err == nil {
				traces[name].DeadLetter = fmt.Sprintf("%s@%d", rec.Reason, rec.Attempts)
				if string(rec.Payload) != payloads[name] {
					t.Errorf("%s: dead-letter payload %q, want the original bytes %q", name, rec.Payload, payloads[name])
				}
			} else {
				t.Errorf("unexpected dead letter %s: %v", m.UUID, err)
			}
			mu.Unlock()
			m.Ack()
		}
	}()

	all := scenarios()
	publish := func(second bool) {
		for _, sc := range all {
			if sc.second != second {
				continue
			}
			msg := message.NewMessage(fmt.Sprintf("%s-%s", run, sc.name), []byte(sc.body(run)))
			mu.Lock()
			byUUID[msg.UUID], traces[sc.name], payloads[sc.name] = sc.name, &trace{}, string(msg.Payload)
			mu.Unlock()
			if err := adapter.Publisher().Publish(topic, msg); err != nil {
				t.Fatalf("publish %s: %v", sc.name, err)
			}
		}
	}
	waitAll := func(what string) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			mu.Lock()
			done := true
			for _, tr := range traces {
				done = done && finished(*tr)
			}
			mu.Unlock()
			if done {
				return
			}
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s not finished within 60s: %s", what, describeTraces(traces))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	publish(false)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitAll("first phase")
	publish(true)
	waitAll("re-injected copy")
	// Watch for deliveries that must not happen: a retry after a final outcome, or an SQS
	// redelivery after the visibility timeout.
	time.Sleep(timing.Visibility + time.Second)
	cancel()
	_ = c.Router.Close()
	<-done

	mu.Lock()
	defer mu.Unlock()
	prov.mu.Lock()
	defer prov.mu.Unlock()
	out := map[string]trace{}
	for _, sc := range all {
		tr := *traces[sc.name]
		tr.Sent, tr.SendAttempts = map[string]int{}, map[string]int{}
		for _, d := range sc.devices {
			if n := prov.sent[d]; n > 0 {
				tr.Sent[d] = n
			}
			if n := prov.attempts[d]; n > 0 {
				tr.SendAttempts[d] = n
			}
		}
		out[sc.name] = tr
	}
	return out
}

func describeTraces(traces map[string]*trace) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(traces)) {
		fmt.Fprintf(&b, "\n  %s: %+v", name, *traces[name])
	}
	return b.String()
}

// TestParityKafkaSQS runs the scenarios on both brokers and requires identical traces, each
// equal to the field report's expectation.
func TestParityKafkaSQS(t *testing.T) {
	kafkaBrokers := testenv.Getenv("MILLRACE_KAFKA_BROKERS", "127.0.0.1:19092")
	if err := dial(strings.Split(kafkaBrokers, ",")[0]); err != nil {
		testenv.Unreachable(t, "Kafka", kafkaBrokers, "MILLRACE_KAFKA_BROKERS", err)
	}
	sqsEndpoint := testenv.Getenv("MILLRACE_SQS_ENDPOINT", "")
	if sqsEndpoint == "" {
		testenv.Unreachable(t, "SQS", "(no endpoint)", "MILLRACE_SQS_ENDPOINT", errors.New("not set; `. .ci/services/sqs.sh` starts fauxqs and sets it"))
	}
	ep, err := url.Parse(sqsEndpoint)
	if err != nil {
		t.Fatalf("MILLRACE_SQS_ENDPOINT: %v", err)
	}
	if err := dial(ep.Host); err != nil {
		testenv.Unreachable(t, "SQS", sqsEndpoint, "MILLRACE_SQS_ENDPOINT", err)
	}
	redisURL := testenv.Getenv("MILLRACE_REDIS_URL", "redis://127.0.0.1:6379/0")
	redisOpts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("MILLRACE_REDIS_URL %q: %v", redisURL, err)
	}
	redisAddr := redisOpts.Addr
	rdb := redis.NewClient(redisOpts)
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		testenv.Unreachable(t, "Redis", redisAddr, "MILLRACE_REDIS_URL", err)
	}

	urls := map[string]string{
		"kafka": "kafka://" + kafkaBrokers + "?group=parity-" + fmt.Sprintf("%08x", rand.Uint32()),
		"sqs":   "sqs+" + ep.Scheme + "://" + ep.Host + "?create=true",
	}
	var mu sync.Mutex
	got := map[string]map[string]trace{}
	t.Run("brokers", func(t *testing.T) {
		for _, broker := range []string{"kafka", "sqs"} {
			t.Run(broker, func(t *testing.T) {
				t.Parallel()
				tr := runScenarios(t, urls[broker], rdb)
				mu.Lock()
				got[broker] = tr
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	for _, sc := range scenarios() {
		k, s := got["kafka"][sc.name], got["sqs"][sc.name]
		if !reflect.DeepEqual(k, sc.want) {
			t.Errorf("%s on Kafka: %+v, want %+v", sc.name, k, sc.want)
		}
		if !reflect.DeepEqual(s, sc.want) {
			t.Errorf("%s on SQS: %+v, want %+v", sc.name, s, sc.want)
		}
		if !reflect.DeepEqual(k, s) {
			t.Errorf("%s differs: Kafka %+v, SQS %+v", sc.name, k, s)
		}
		t.Logf("%-26s kafka %v %q | sqs %v %q", sc.name, k.Calls, k.DeadLetter, s.Calls, s.DeadLetter)
	}
}

func dial(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}
