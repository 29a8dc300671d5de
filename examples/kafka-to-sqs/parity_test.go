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
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	natsadapter "github.com/millrace/millrace/adapters/nats"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/internal/testenv"
)

// The field report's verified scenarios, with its test values (5 attempts) and the delay
// shortened to 1 s (SQS's smallest), run on Kafka, on SQS and on NATS JetStream with the same
// handler, the same policy and the same Redis store. Each scenario's trace (attempt numbers and
// outcomes, dead letter and give-up attempt, sends per device) must equal the expected one on
// every broker.

// trace is what one message went through.
type trace struct {
	Calls        []string       // "attempt:OUTCOME" in order
	DeadLetter   string         // "reason@attempts", "" if not dead-lettered
	Sent         map[string]int // successful sends per device
	SendAttempts map[string]int // send calls per device
}

// retryShape is how a broker carries a message from one attempt to the next, seen on every
// scenario with a retry. It is not part of the trace: it differs between the brokers by
// design (see retryShapes and README.md, "Differences that remain").
type retryShape struct {
	SameNativeID     bool // every attempt has the same Attempt.NativeID
	CarriesLastError bool // every attempt after the first has the previous one's error (Attempt.LastError)
}

// retryShapes is each broker's retry shape, with the reason: the one difference between the
// brokers the scenarios see. Each broker's must be exactly this.
var retryShapes = map[string]struct {
	want   retryShape
	reason string
}{
	"kafka": {retryShape{SameNativeID: false, CarriesLastError: true},
		"a retry is a new record on the retry topic (a new offset), which carries millrace's attempt headers and the error"},
	"sqs": {retryShape{SameNativeID: true, CarriesLastError: false},
		"a retry is the same message made visible again (ChangeMessageVisibility); SQS cannot change its attributes"},
	"nats": {retryShape{SameNativeID: true, CarriesLastError: false},
		"a retry is the same stream message delivered again (NakWithDelay); a Nak carries no payload"},
}

// attemptsSeen is what the attempts of one message had in common.
type attemptsSeen struct {
	nativeIDs map[string]bool
	retries   int // attempts after the first
	lastErrs  int // of those, attempts with a LastError
}

func (a attemptsSeen) shape() retryShape {
	return retryShape{SameNativeID: len(a.nativeIDs) == 1, CarriesLastError: a.retries > 0 && a.lastErrs == a.retries}
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
// 1 s apart (window 4 s), a 3 s lease, a 2 s budget, a 3 s SQS visibility timeout, a 5 s NATS
// ack wait (the NATS adapter wants the budget below half of it).
func parityTiming() Timing {
	return Timing{
		Policy:     millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)},
		LeaseTTL:   3 * time.Second,
		Budget:     2 * time.Second,
		Visibility: 3 * time.Second,
		AckWait:    5 * time.Second,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// redeliveryWatch is how long runScenarios keeps consuming after every trace is final, to see
// deliveries that must not happen (a retry after a final outcome, a redelivery of a message
// whose settlement was lost): one second past the broker's redelivery timeout, SQS's
// visibility timeout and NATS's ack wait. Kafka redelivers only after a nack (500 ms) or a
// rebalance; it is watched as long as SQS.
func redeliveryWatch(broker string, t Timing) time.Duration {
	if broker == "nats" {
		return t.AckWait + time.Second
	}
	return t.Visibility + time.Second
}

// runScenarios runs every scenario on broker (kafka, sqs or nats), opened from brokerURL, and
// returns the traces, and the retry shapes of the scenarios with a retry.
func runScenarios(t *testing.T, broker, brokerURL string, rdb *redis.Client) (map[string]trace, map[string]retryShape) {
	run := fmt.Sprintf("parity-%08x", rand.Uint32())
	timing := parityTiming()
	timing.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	adapter, err := NewAdapter(context.Background(), brokerURL, timing)
	if err != nil {
		t.Fatalf("NewAdapter(%s): %v", brokerURL, err)
	}
	defer adapter.Close()
	topic := "push.requested." + run
	if na, ok := adapter.(*natsadapter.Adapter); ok {
		// JetStream keeps its streams on disk across server restarts: remove this run's.
		t.Cleanup(func() { deleteStreams(t, na, topic) })
	}
	store, err := idempotency.NewRedisStore(rdb, idempotency.StoreOptions{Prefix: "millrace-parity:" + run + ":notification:"})
	if err != nil {
		t.Fatal(err)
	}
	dir := &fakeDirectory{calls: map[string]int{}}
	prov := &fakeProvider{attempts: map[string]int{}, sent: map[string]int{}}

	var mu sync.Mutex
	byUUID := map[string]string{} // message UUID -> scenario
	traces := map[string]*trace{}
	seen := map[string]*attemptsSeen{}
	observe := func(h message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error {
			err := h(msg)
			mu.Lock()
			if name, ok := byUUID[msg.UUID]; ok {
				a := millrace.AttemptFrom(msg)
				traces[name].Calls = append(traces[name].Calls, fmt.Sprintf("%d:%s", a.Number, outcome(err)))
				as := seen[name]
				as.nativeIDs[a.NativeID] = true
				if a.Number > 1 {
					as.retries++
					if a.LastError != "" {
						as.lastErrs++
					}
				}
			}
			mu.Unlock()
			return err
		}
	}
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
			seen[sc.name] = &attemptsSeen{nativeIDs: map[string]bool{}}
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
	// Watch for deliveries that must not happen: a retry after a final outcome, or a
	// redelivery after SQS's visibility timeout or NATS's ack wait.
	time.Sleep(redeliveryWatch(broker, timing))
	cancel()
	_ = c.Router.Close()
	<-done

	mu.Lock()
	defer mu.Unlock()
	prov.mu.Lock()
	defer prov.mu.Unlock()
	out, shapes := map[string]trace{}, map[string]retryShape{}
	for _, sc := range all {
		if seen[sc.name].retries > 0 {
			shapes[sc.name] = seen[sc.name].shape()
		}
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
	return out, shapes
}

// deleteStreams deletes the JetStream streams of topic and of its dead letters. It runs after
// the adapter is closed, on a connection of its own.
func deleteStreams(t *testing.T, a *natsadapter.Adapter, topic string) {
	nc, err := natsgo.Connect(a.Config().URL, natsgo.Timeout(2*time.Second), natsgo.MaxReconnects(0))
	if err != nil {
		t.Errorf("delete the streams of %s: %v", topic, err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Errorf("delete the streams of %s: %v", topic, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, subject := range []string{topic, a.DeadLetterTopic(topic)} {
		if err := js.DeleteStream(ctx, a.Config().StreamName(subject)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete the stream of %s: %v", subject, err)
		}
	}
}

func describeTraces(traces map[string]*trace) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(traces)) {
		fmt.Fprintf(&b, "\n  %s: %+v", name, *traces[name])
	}
	return b.String()
}

// brokers are the brokers the scenarios run on, in the order traces are compared.
var brokers = []string{"kafka", "sqs", "nats"}

// TestParityKafkaSQS runs the scenarios on Kafka, SQS and NATS JetStream, concurrently, and
// requires identical traces, each equal to the field report's expectation.
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
	natsServer := natsURL(t)
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
		// A 1 s long poll instead of the default 20 s: the router's Close waits for the receive
		// in flight (SQS counts a receive even when its request is cancelled), which took 16 of
		// the test's 24 s. The traces do not depend on it.
		"sqs":  "sqs+" + ep.Scheme + "://" + ep.Host + "?create=true&wait_time=1s",
		"nats": natsServer, // withTiming adds ack_wait, processing_budget and durable
	}
	var mu sync.Mutex
	got := map[string]map[string]trace{}
	gotShapes := map[string]map[string]retryShape{}
	// The brokers run at the same time: the scenarios mostly wait (retry delays, redelivery
	// watch), and t.Parallel would run only -parallel (GOMAXPROCS) of them at once.
	t.Run("brokers", func(t *testing.T) {
		var wg sync.WaitGroup
		for _, broker := range brokers {
			wg.Go(func() {
				t.Run(broker, func(t *testing.T) {
					tr, shapes := runScenarios(t, broker, urls[broker], rdb)
					mu.Lock()
					got[broker], gotShapes[broker] = tr, shapes
					mu.Unlock()
				})
			})
		}
		wg.Wait()
	})
	if t.Failed() {
		return
	}
	for _, sc := range scenarios() {
		var line strings.Builder
		for i, broker := range brokers {
			tr := got[broker][sc.name]
			if !reflect.DeepEqual(tr, sc.want) {
				t.Errorf("%s on %s: %+v, want %+v", sc.name, broker, tr, sc.want)
			}
			if i > 0 && !reflect.DeepEqual(tr, got[brokers[0]][sc.name]) {
				t.Errorf("%s differs: %s %+v, %s %+v", sc.name, brokers[0], got[brokers[0]][sc.name], broker, tr)
			}
			if i > 0 {
				line.WriteString(" | ")
			}
			fmt.Fprintf(&line, "%s %v %q", broker, tr.Calls, tr.DeadLetter)
		}
		t.Logf("%-26s %s", sc.name, line.String())
	}
	// The brokers differ, by design, in how a retry reaches the next attempt: each must do it
	// exactly as retryShapes says, on every scenario with a retry.
	for _, broker := range brokers {
		rs := retryShapes[broker]
		if len(gotShapes[broker]) == 0 {
			t.Errorf("%s: no scenario retried", broker)
		}
		for _, name := range slices.Sorted(maps.Keys(gotShapes[broker])) {
			if sh := gotShapes[broker][name]; sh != rs.want {
				t.Errorf("%s on %s: retry shape %+v, want %+v (%s)", name, broker, sh, rs.want, rs.reason)
			}
		}
		t.Logf("%-5s retries: %+v (%s)", broker, rs.want, rs.reason)
	}
}

func dial(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}
