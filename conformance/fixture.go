package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// call is one handler invocation as the suite saw it.
type call struct {
	uuid    string
	attempt millrace.Attempt
	start   time.Time
	end     time.Time
}

// fixture is one test's adapter, topic and handler recorder.
type fixture struct {
	t       *testing.T
	opts    Options
	harness Harness
	adapter millrace.Adapter
	topic   string
	handler string

	mu     sync.Mutex
	calls  []call
	notify chan struct{}
}

func newFixture(t *testing.T, h Harness, opts Options) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	a, err := h.NewAdapter(ctx, t)
	if err != nil {
		t.Fatalf("harness: NewAdapter: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return &fixture{
		t:       t,
		opts:    opts,
		harness: h,
		adapter: a,
		topic:   opts.TopicName(fmt.Sprintf("conf.%s.%08x", strings.ToLower(name), rand.Uint32())),
		handler: "conformance-handler",
		notify:  make(chan struct{}, 1),
	}
}

// policy returns a fixed-delay policy with the suite's delay.
func (f *fixture) policy(maxAttempts int, delay time.Duration) millrace.RetryPolicy {
	return millrace.RetryPolicy{MaxAttempts: maxAttempts, Backoff: millrace.Fixed(delay)}
}

// run starts a router for cfg with h recorded, and stops it when the test ends.
func (f *fixture) run(cfg router.Config, h router.HandlerFunc) {
	f.t.Helper()
	if cfg.Adapter == nil {
		cfg.Adapter = f.adapter
	}
	cfg.Logger = slog.New(slog.NewTextHandler(testOutput(f.t), &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.CloseTimeout = 5 * time.Second
	r, err := router.New(cfg)
	if err != nil {
		f.t.Fatalf("router.New: %v", err)
	}
	r.Handle(f.handler, f.topic, func(ctx context.Context, msg *message.Message, a millrace.Attempt) error {
		c := call{uuid: msg.UUID, attempt: a, start: time.Now()}
		defer func() { // deferred, so a panicking handler is recorded too
			c.end = time.Now()
			f.mu.Lock()
			f.calls = append(f.calls, c)
			f.mu.Unlock()
			select {
			case f.notify <- struct{}{}:
			default:
			}
		}()
		return h(ctx, msg, a)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		_ = r.Close()
		<-done
	})
	select {
	case <-r.Running():
	case err := <-done:
		f.t.Fatalf("router stopped before running: %v", err)
	case <-time.After(f.opts.Timeout):
		f.t.Fatalf("router not running after %s", f.opts.Timeout)
	}
}

// publish sends messages to the fixture's topic.
func (f *fixture) publish(msgs ...*message.Message) {
	f.t.Helper()
	if err := f.adapter.Publisher().Publish(f.topic, msgs...); err != nil {
		f.t.Fatalf("publish: %v", err)
	}
}

// snapshot returns the calls so far.
func (f *fixture) snapshot() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// waitCalls waits until cond holds for the recorded calls, failing after the timeout.
func (f *fixture) waitCalls(what string, cond func([]call) bool) []call {
	f.t.Helper()
	deadline := time.After(f.opts.Timeout)
	for {
		if c := f.snapshot(); cond(c) {
			return c
		}
		select {
		case <-f.notify:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			f.t.Fatalf("timed out after %s waiting for %s; calls: %s", f.opts.Timeout, what, describe(f.snapshot()))
		}
	}
}

// callsFor returns the calls that handled uuid.
func callsFor(calls []call, uuid string) []call {
	var out []call
	for _, c := range calls {
		if c.uuid == uuid {
			out = append(out, c)
		}
	}
	return out
}

func describe(calls []call) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "[%s attempt=%d] ", c.uuid, c.attempt.Number)
	}
	return b.String()
}

// deadLetters collects the dead-letter records of the fixture's topic.
type deadLetters struct {
	mu      sync.Mutex
	records []deadletter.Record
	errs    []error
}

// watchDeadLetters subscribes to the fixture topic's dead-letter destination.
func (f *fixture) watchDeadLetters() *deadLetters {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub := f.adapter.Subscriber()
	if r, ok := f.harness.(DeadLetterReader); ok {
		var err error
		if sub, err = r.DeadLetterSubscriber(ctx, f.t, f.adapter); err != nil {
			cancel()
			f.t.Fatalf("harness: DeadLetterSubscriber: %v", err)
		}
	}
	ch, err := sub.Subscribe(ctx, f.adapter.DeadLetterTopic(f.topic))
	if err != nil {
		cancel()
		f.t.Fatalf("subscribe to dead-letter topic %q: %v", f.adapter.DeadLetterTopic(f.topic), err)
	}
	dl := &deadLetters{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ch {
			rec, err := deadletter.FromMessage(msg)
			dl.mu.Lock()
			if err != nil {
				dl.errs = append(dl.errs, err)
			} else {
				rec.Payload = append([]byte(nil), rec.Payload...)
				dl.records = append(dl.records, rec)
			}
			dl.mu.Unlock()
			msg.Ack()
		}
	}()
	f.t.Cleanup(func() {
		cancel()
		_ = sub.Close()
		<-done
	})
	return dl
}

func (d *deadLetters) snapshot() ([]deadletter.Record, []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deadletter.Record(nil), d.records...), append([]error(nil), d.errs...)
}

// waitN waits for exactly n records, then watches for Quiet to prove no more arrive.
func (f *fixture) waitDeadLetters(d *deadLetters, n int) []deadletter.Record {
	f.t.Helper()
	deadline := time.Now().Add(f.opts.Timeout)
	for {
		recs, errs := d.snapshot()
		if len(errs) > 0 {
			f.t.Fatalf("dead-letter topic holds undecodable records: %v", errs)
		}
		if len(recs) >= n {
			break
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out after %s waiting for %d dead letters, have %d", f.opts.Timeout, n, len(recs))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(f.opts.Quiet)
	recs, _ := d.snapshot()
	if len(recs) != n {
		f.t.Fatalf("want exactly %d dead letters, got %d", n, len(recs))
	}
	return recs
}

// faultyAdapter fails the first deadLetterFaults dead-letter writes and the first retryFaults
// retry schedules, to prove that a failed write never acknowledges the original.
type faultyAdapter struct {
	millrace.Adapter
	mu               sync.Mutex
	deadLetterFaults int
	retryFaults      int
	deadLetterCalls  int
	retryCalls       int
}

var errInjected = errors.New("conformance: injected fault")

func (a *faultyAdapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	a.mu.Lock()
	a.deadLetterCalls++
	fail := a.deadLetterCalls <= a.deadLetterFaults
	a.mu.Unlock()
	if fail {
		return errInjected
	}
	return a.Adapter.DeadLetter(ctx, msg, rec)
}

func (a *faultyAdapter) ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	a.mu.Lock()
	a.retryCalls++
	fail := a.retryCalls <= a.retryFaults
	a.mu.Unlock()
	if fail {
		return 0, errInjected
	}
	return a.Adapter.ScheduleRetry(ctx, msg, req)
}

func (a *faultyAdapter) counts() (deadLetters, retries int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deadLetterCalls, a.retryCalls
}
