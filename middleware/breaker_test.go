package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/middleware"
)

// fakeTimers stands in for time.AfterFunc: a test fires the timers it wants, so no assertion
// depends on how long anything takes.
type fakeTimers struct {
	armed chan *fakeTimer
}

type fakeTimer struct {
	d    time.Duration
	f    func()
	mu   sync.Mutex
	done bool // fired or stopped
}

func newFakeTimers() *fakeTimers { return &fakeTimers{armed: make(chan *fakeTimer, 100)} }

func (ft *fakeTimers) after(d time.Duration, f func()) func() bool {
	t := &fakeTimer{d: d, f: f}
	ft.armed <- t
	return func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		was := !t.done
		t.done = true
		return was
	}
}

// next returns the next timer armed with duration d, discarding others.
func (ft *fakeTimers) next(t *testing.T, d time.Duration) *fakeTimer {
	t.Helper()
	for {
		select {
		case tm := <-ft.armed:
			if tm.d == d {
				return tm
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no timer of %s armed", d)
		}
	}
}

func (tm *fakeTimer) fire() {
	tm.mu.Lock()
	if tm.done {
		tm.mu.Unlock()
		return
	}
	tm.done = true
	tm.mu.Unlock()
	tm.f()
}

// fakeClock is a settable Now.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// breakerRig is one breaker with fake timers, a record of its events and of waiting messages.
type breakerRig struct {
	timers  *fakeTimers
	clock   *fakeClock
	waiting chan string
	mu      sync.Mutex
	events  []middleware.BreakerEvent
}

const (
	probeEvery = 500 * time.Millisecond
	maxHold    = 7 * time.Second
)

func newBreakerRig(cfg middleware.BreakerConfig) (*breakerRig, middleware.BreakerConfig) {
	r := &breakerRig{timers: newFakeTimers(), clock: &fakeClock{}, waiting: make(chan string, 100)}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = probeEvery
	}
	cfg.Now = r.clock.now
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.OnStateChange == nil {
		cfg.OnStateChange = func(_ context.Context, ev middleware.BreakerEvent) {
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
		}
	}
	cfg = middleware.BreakerTestHooks(cfg, r.timers.after, func(msg *message.Message) { r.waiting <- msg.UUID })
	return r, cfg
}

func (r *breakerRig) transitions() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, ev := range r.events {
		parts = append(parts, ev.From.String()+">"+ev.To.String())
	}
	return strings.Join(parts, " ")
}

func (r *breakerRig) lastEvent() middleware.BreakerEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[len(r.events)-1]
}

// awaitWaiting waits until the message uuid waits in the breaker.
func (r *breakerRig) awaitWaiting(t *testing.T, uuid string) {
	t.Helper()
	select {
	case got := <-r.waiting:
		if got != uuid {
			t.Fatalf("%s waits, want %s", got, uuid)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never waited", uuid)
	}
}

// result is what a handler call returned.
type result struct {
	uuid string
	err  error
}

// start runs h on msg in a goroutine and reports its return on done.
func start(h message.HandlerFunc, msg *message.Message, done chan<- result) {
	go func() {
		_, err := h(msg)
		done <- result{msg.UUID, err}
	}()
}

func awaitResult(t *testing.T, done <-chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no handler call returned")
		return result{}
	}
}

// noResult asserts that no call has returned: every call that could have is already accounted
// for, so this holds or fails without any timing.
func noResult(t *testing.T, done <-chan result, why string) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("%s returned (err %v): %s", r.uuid, r.err, why)
	default:
	}
}

// switchable is a handler whose dependency is down while down is set; it counts its calls.
type switchable struct {
	down  atomic.Bool
	mu    sync.Mutex
	calls []string
	gate  chan struct{} // when set, a call waits for it before answering
}

func (s *switchable) handle(msg *message.Message) ([]*message.Message, error) {
	s.mu.Lock()
	s.calls = append(s.calls, msg.UUID)
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if s.down.Load() {
		return nil, errDown
	}
	return nil, nil
}

func (s *switchable) called() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// breakerOver wraps h in Breaker and Classify, as the router stacks them.
func breakerOver(cfg middleware.BreakerConfig, h message.HandlerFunc) message.HandlerFunc {
	return middleware.Breaker(cfg)(middleware.Classify(nil)(h))
}

func TestBreakerValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   middleware.BreakerConfig
		field string
	}{
		{middleware.BreakerConfig{}, "BreakerConfig.Threshold"},
		{middleware.BreakerConfig{Threshold: -1, FailureRate: 0.5}, "BreakerConfig.Threshold"},
		{middleware.BreakerConfig{Threshold: 1, ProbeInterval: -time.Second}, "BreakerConfig.ProbeInterval"},
		{middleware.BreakerConfig{Threshold: 1, MaxHold: -time.Second}, "BreakerConfig.MaxHold"},
		{middleware.BreakerConfig{FailureRate: 1.5}, "BreakerConfig.FailureRate"},
		{middleware.BreakerConfig{FailureRate: -0.1}, "BreakerConfig.FailureRate"},
		{middleware.BreakerConfig{FailureRate: math.NaN()}, "BreakerConfig.FailureRate"},
		{middleware.BreakerConfig{FailureRate: 0.5, Window: -time.Second}, "BreakerConfig.Window"},
		{middleware.BreakerConfig{FailureRate: 0.5, MinCalls: -1}, "BreakerConfig.MinCalls"},
	} {
		err := tc.cfg.Validate()
		var ce *millrace.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, millrace.ErrInvalidConfig) {
			t.Errorf("%+v: err %v, want a ConfigError for %s", tc.cfg, err, tc.field)
		}
	}
	for _, ok := range []middleware.BreakerConfig{{Threshold: 1}, {FailureRate: 0.5}, {FailureRate: 1, Window: time.Minute, MinCalls: 1}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// Only consecutive Retry outcomes count: Success, Discard and Malformed reset the count, and a
// shutdown counts nothing.
func TestBreakerCountsConsecutiveRetries(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 3})
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	steps := []struct {
		err      error
		shutdown bool
	}{
		{err: errDown}, {err: errDown}, {err: nil}, // reset by a success
		{err: errDown}, {err: errDown}, {err: millrace.Discard(errors.New("opted out"))}, // by a discard
		{err: millrace.Retry(errDown)}, {err: errDown}, {err: millrace.Malformed(errors.New("bad json"))}, // by a malformed
		{err: errDown}, {err: millrace.RetryAfter(errDown, time.Minute)},
		{err: context.Canceled, shutdown: true}, // a shutdown counts nothing
	}
	// The same steps through one breaker.
	var next atomic.Int32
	h := breakerOver(cfg, func(*message.Message) ([]*message.Message, error) {
		if i := int(next.Add(1)) - 1; i < len(steps) {
			return nil, steps[i].err
		}
		return nil, errDown
	})
	for i, st := range steps {
		msg := message.NewMessage("m", nil)
		if st.shutdown {
			msg.SetContext(canceled)
		}
		if _, err := h(msg); (err == nil) != (st.err == nil) {
			t.Fatalf("step %d: err %v", i, err)
		}
		if got := rig.transitions(); got != "" {
			t.Fatalf("step %d: breaker changed (%s) before 3 consecutive Retry outcomes", i, got)
		}
	}
	if _, err := h(message.NewMessage("m", nil)); err == nil {
		t.Fatal("no error")
	}
	if got := rig.transitions(); got != "closed>open" {
		t.Fatalf("transitions %q, want closed>open on the 3rd consecutive Retry", got)
	}
	if ev := rig.lastEvent(); ev.Failures != 3 || !errors.Is(ev.Err, errDown) || ev.Waiting != 0 {
		t.Fatalf("event %+v", ev)
	}
}

// While open, messages wait without calling the handler; one probe at a time goes through
// once the probe timer fires; a failed probe re-arms it; a successful one closes the breaker
// and releases every waiting message to the handler.
func TestBreakerHoldsUntilAProbeSucceeds(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 2})
	dep := &switchable{}
	dep.down.Store(true)
	h := breakerOver(cfg, dep.handle)
	for _, id := range []string{"a", "b"} {
		if _, err := h(message.NewMessage(id, nil)); err == nil {
			t.Fatalf("%s: no error while down", id)
		}
	}
	if got := rig.transitions(); got != "closed>open" {
		t.Fatalf("transitions %q", got)
	}
	probe1 := rig.timers.next(t, probeEvery)

	done := make(chan result, 10)
	for _, id := range []string{"w1", "w2", "w3"} {
		start(h, message.NewMessage(id, nil), done)
		rig.awaitWaiting(t, id)
	}
	if got := dep.called(); len(got) != 2 {
		t.Fatalf("handler called while open: %v", got)
	}

	probe1.fire() // one waiter is the probe; it fails
	r := awaitResult(t, done)
	waiting := map[string]bool{"w1": true, "w2": true, "w3": true}
	if !waiting[r.uuid] || !errors.Is(r.err, errDown) || millrace.Classify(r.err, nil).Outcome != millrace.OutcomeRetry {
		t.Fatalf("probe returned %+v, want a waiting message with its Retry error (the policy retries it)", r)
	}
	delete(waiting, r.uuid)
	if got := rig.transitions(); got != "closed>open open>half-open half-open>open" {
		t.Fatalf("transitions %q", got)
	}
	if ev := rig.lastEvent(); ev.Failures != 3 || ev.Waiting != 2 {
		t.Fatalf("failed probe event %+v, want 3 failures and 2 waiting", ev)
	}
	noResult(t, done, "only the probe may leave an open breaker")
	if got := dep.called(); len(got) != 3 {
		t.Fatalf("calls %v, want one probe", got)
	}

	// The dependency is back; the next probe blocks in the handler: half-open admits no one else.
	dep.down.Store(false)
	gate := make(chan struct{})
	dep.mu.Lock()
	dep.gate = gate
	dep.mu.Unlock()
	probe2 := rig.timers.next(t, probeEvery)
	probe2.fire()
	start(h, message.NewMessage("late", nil), done)
	rig.awaitWaiting(t, "late")
	for len(dep.called()) < 4 {
		time.Sleep(time.Millisecond) // until the probe is in the handler (no assertion on time)
	}
	noResult(t, done, "half-open lets one probe through")
	if got := dep.called(); len(got) != 4 || !waiting[got[3]] {
		t.Fatalf("calls %v, want one of the waiting %v as the only new call", got, waiting)
	}
	dep.mu.Lock()
	dep.gate = nil
	dep.mu.Unlock()
	close(gate)

	got := map[string]error{}
	for range 3 {
		r := awaitResult(t, done)
		got[r.uuid] = r.err
	}
	waiting["late"] = true
	for id := range waiting {
		if err, ok := got[id]; !ok || err != nil {
			t.Fatalf("%s: returned %v (present %v), want handled with success", id, err, ok)
		}
	}
	if tr := rig.transitions(); tr != "closed>open open>half-open half-open>open open>half-open half-open>closed" {
		t.Fatalf("transitions %q", tr)
	}
	if ev := rig.lastEvent(); ev.Failures != 0 || ev.Waiting != 2 || ev.Err != nil {
		t.Fatalf("close event %+v, want 2 waiting released", ev)
	}
	if calls := dep.called(); len(calls) != 6 {
		t.Fatalf("calls %v, want every waiting message handled once after the close", calls)
	}
	// Closed again: a message is handled at once.
	if _, err := h(message.NewMessage("after", nil)); err != nil {
		t.Fatal(err)
	}
}

// A success of a message admitted before the breaker opened closes it: the dependency answered.
func TestBreakerClosesOnAnySuccess(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 1})
	release := make(chan struct{})
	var slowOK atomic.Bool
	h := breakerOver(cfg, func(msg *message.Message) ([]*message.Message, error) {
		if msg.UUID == "slow" {
			slowOK.Store(true)
			<-release
			return nil, nil
		}
		if msg.UUID == "fails" {
			return nil, errDown
		}
		return nil, nil
	})
	done := make(chan result, 10)
	start(h, message.NewMessage("slow", nil), done)
	for !slowOK.Load() {
		time.Sleep(time.Millisecond)
	}
	if _, err := h(message.NewMessage("fails", nil)); err == nil {
		t.Fatal("no error")
	}
	start(h, message.NewMessage("waits", nil), done)
	rig.awaitWaiting(t, "waits")
	close(release)
	for range 2 {
		if r := awaitResult(t, done); r.err != nil {
			t.Fatalf("%+v", r)
		}
	}
	if got := rig.transitions(); got != "closed>open open>closed" {
		t.Fatalf("transitions %q", got)
	}
}

// stackRecorder is a concurrency-safe adapter side for the full stack.
type stackRecorder struct {
	mu          sync.Mutex
	retries     int
	deadLetters int
}

func (r *stackRecorder) DecodeAttempt(*message.Message) millrace.Attempt {
	return millrace.Attempt{Number: 1, Broker: "test", OriginalTopic: "orders"}
}

func (r *stackRecorder) ScheduleRetry(context.Context, *message.Message, millrace.RetryRequest) (millrace.Disposition, error) {
	r.mu.Lock()
	r.retries++
	r.mu.Unlock()
	return millrace.NackOriginal, nil
}

func (r *stackRecorder) DeadLetter(context.Context, *message.Message, deadletter.Record) error {
	r.mu.Lock()
	r.deadLetters++
	r.mu.Unlock()
	return nil
}

func (r *stackRecorder) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retries, r.deadLetters
}

// breakerStack is the router's stack with the breaker in place.
func breakerStack(r *stackRecorder, cfg middleware.BreakerConfig, h message.HandlerFunc) message.HandlerFunc {
	p := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	mws := []message.HandlerMiddleware{
		middleware.Poison(r, middleware.PoisonConfig{Logger: slog.New(slog.DiscardHandler)}),
		middleware.Attempt(r, p),
		middleware.Retry(r, middleware.RetryConfig{Policy: p, Logger: slog.New(slog.DiscardHandler)}),
		middleware.Breaker(cfg),
		middleware.Classify(nil),
		middleware.Budget(0),
		middleware.Recover(),
	}
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// A message that waited MaxHold leaves the stack nacked with a nil error: the handler is not
// called, nothing is scheduled or dead-lettered, and the router's ack is a no-op.
func TestBreakerMaxHoldHandsBackUnhandled(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 1, MaxHold: maxHold})
	rec := &stackRecorder{}
	dep := &switchable{}
	dep.down.Store(true)
	h := breakerStack(rec, cfg, dep.handle)
	if _, err := h(message.NewMessage("a", nil)); err != nil {
		t.Fatalf("a: %v (a scheduled retry returns nil)", err)
	}
	if got := rig.transitions(); got != "closed>open" {
		t.Fatalf("transitions %q", got)
	}
	msg := message.NewMessage("held", nil)
	done := make(chan result, 1)
	start(h, msg, done)
	rig.awaitWaiting(t, "held")
	rig.timers.next(t, maxHold).fire()
	r := awaitResult(t, done)
	if r.err != nil {
		t.Fatalf("handed back with %v, want nil (Retry would schedule a retry for an error)", r.err)
	}
	select {
	case <-msg.Nacked():
	default:
		t.Fatal("not nacked: the broker would never deliver it again")
	}
	if msg.Ack() {
		t.Fatal("the router's ack after the nil return acknowledged a handed-back message")
	}
	if calls := dep.called(); len(calls) != 1 {
		t.Fatalf("handler calls %v, want only a's", calls)
	}
	if retries, dls := rec.counts(); retries != 1 || dls != 0 {
		t.Fatalf("retries %d dead letters %d, want only a's retry", retries, dls)
	}
}

// A waiting message whose context is cancelled returns the cancellation, which Retry passes
// on (the router nacks): no attempt is scheduled and nothing is counted.
func TestBreakerCancelledWhileWaiting(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 1})
	rec := &stackRecorder{}
	dep := &switchable{}
	dep.down.Store(true)
	h := breakerStack(rec, cfg, dep.handle)
	_, _ = h(message.NewMessage("a", nil))
	ctx, cancel := context.WithCancel(context.Background())
	msg := message.NewMessage("held", nil)
	msg.SetContext(ctx)
	done := make(chan result, 1)
	start(h, msg, done)
	rig.awaitWaiting(t, "held")
	cancel()
	if r := awaitResult(t, done); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", r.err)
	}
	if retries, dls := rec.counts(); retries != 1 || dls != 0 || len(dep.called()) != 1 {
		t.Fatalf("retries %d dead letters %d calls %v", retries, dls, dep.called())
	}
	if got := rig.transitions(); got != "closed>open" {
		t.Fatalf("transitions %q", got)
	}
}

// Closing Stop ends the holding: the waiting message and one that arrives later are handled
// (never nacked: an adapter that redelivers a nacked message at once would give it back to
// the closing consumer again and again, counting deliveries, until it is dead-lettered).
func TestBreakerStopLetsWaitingMessagesThrough(t *testing.T) {
	stop := make(chan struct{})
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 1, Stop: stop})
	dep := &switchable{}
	dep.down.Store(true)
	h := breakerOver(cfg, dep.handle)
	_, _ = h(message.NewMessage("a", nil))
	held := message.NewMessage("held", nil)
	done := make(chan result, 2)
	start(h, held, done)
	rig.awaitWaiting(t, "held")
	close(stop)
	awaitResult(t, done)
	late := message.NewMessage("late", nil)
	_, _ = h(late)
	for _, m := range []*message.Message{held, late} {
		select {
		case <-m.Nacked():
			t.Fatalf("%s was nacked (handed back) after Stop", m.UUID)
		default:
		}
	}
	if calls := dep.called(); len(calls) != 3 {
		t.Fatalf("calls %v, want a, held and late handled", calls)
	}
}

func TestBreakerBoundedMaxHold(t *testing.T) {
	for _, tc := range []struct {
		maxHold, maxBudget, budget, want time.Duration
	}{
		{0, 10 * time.Second, 4 * time.Second, 6 * time.Second},                // room
		{0, 10 * time.Second, 10 * time.Second, 10 * time.Second},              // no room: the claim
		{20 * time.Second, 10 * time.Second, 4 * time.Second, 6 * time.Second}, // capped
		{2 * time.Second, 10 * time.Second, 4 * time.Second, 2 * time.Second},  // kept
		{0, 0, 0, 0}, // not bounded
	} {
		got := middleware.BreakerConfig{Threshold: 1, MaxHold: tc.maxHold}.Bounded(tc.maxBudget, tc.budget).MaxHold
		if got != tc.want {
			t.Errorf("MaxHold %s Bounded(%s, %s): %s, want %s", tc.maxHold, tc.maxBudget, tc.budget, got, tc.want)
		}
	}
}

// Bounded with no room: a message that had to wait is handed back rather than handled (its
// handler could outlive its claim); one that arrives while the probe is due is the probe.
func TestBreakerBoundedWithoutRoom(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 1}.Bounded(10*time.Second, 10*time.Second))
	dep := &switchable{}
	dep.down.Store(true)
	h := breakerOver(cfg, dep.handle)
	_, _ = h(message.NewMessage("a", nil))
	held := message.NewMessage("held", nil)
	done := make(chan result, 2)
	start(h, held, done)
	rig.awaitWaiting(t, "held")
	rig.clock.advance(time.Second)
	rig.timers.next(t, probeEvery).fire()
	if r := awaitResult(t, done); r.err != nil || r.uuid != "held" {
		t.Fatalf("%+v", r)
	}
	select {
	case <-held.Nacked():
	default:
		t.Fatal("held: not handed back")
	}
	dep.down.Store(false)
	if _, err := h(message.NewMessage("fresh", nil)); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	if calls := dep.called(); len(calls) != 2 || calls[1] != "fresh" {
		t.Fatalf("calls %v, want a and the fresh probe", calls)
	}
	if got := rig.transitions(); got != "closed>open open>half-open half-open>closed" {
		t.Fatalf("transitions %q", got)
	}
}

// Each handler the middleware wraps has a breaker of its own.
func TestBreakerIsPerHandler(t *testing.T) {
	_, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 1})
	mw := middleware.Breaker(cfg)
	down := mw(failing())
	up := mw(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	if _, err := down(message.NewMessage("a", nil)); err == nil {
		t.Fatal("no error")
	}
	if _, err := up(message.NewMessage("b", nil)); err != nil { // would block if the state were shared
		t.Fatal(err)
	}
}

// A panic in OnStateChange is logged; the message is handled as without the hook.
func TestBreakerHookPanicIsRecovered(t *testing.T) {
	var logs bytes.Buffer
	cfg := middleware.BreakerConfig{Threshold: 1,
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
		OnStateChange: func(context.Context, middleware.BreakerEvent) { panic("hook bug") },
	}
	msg := message.NewMessage("a", nil)
	if _, err := breakerOver(cfg, failing())(msg); !errors.Is(err, errDown) {
		t.Fatalf("err %v, want the handler's", err)
	}
	out := logs.String()
	for _, want := range []string{"hook panicked", "hook bug", "outage breaker open", "consecutive_failures=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// FailureRate opens the breaker on a dependency that fails often but never Threshold times in a
// row, once MinCalls outcomes are within Window; outcomes older than Window no longer count.
func TestBreakerFailureRate(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 5, FailureRate: 0.6, Window: 10 * time.Second, MinCalls: 10})
	var fail atomic.Bool
	h := breakerOver(cfg, func(*message.Message) ([]*message.Message, error) {
		if fail.Load() {
			return nil, errDown
		}
		return nil, nil
	})
	call := func(failed bool) {
		t.Helper()
		fail.Store(failed)
		if _, err := h(message.NewMessage("m", nil)); (err != nil) != failed {
			t.Fatalf("err %v", err)
		}
	}
	// 9 outcomes, 6 failed (two in a row at most): below MinCalls, nothing opens.
	for _, f := range []bool{true, true, false, true, true, false, true, true, false} {
		call(f)
	}
	if got := rig.transitions(); got != "" {
		t.Fatalf("opened below MinCalls: %s", got)
	}
	// The window moves on: those 9 leave it, 9 new ones are as many as before.
	rig.clock.advance(11 * time.Second)
	for _, f := range []bool{true, true, false, true, true, false, true, true, false} {
		call(f)
	}
	if got := rig.transitions(); got != "" {
		t.Fatalf("counted outcomes older than Window: %s", got)
	}
	call(true) // 10 outcomes, 7 failed: 70 % >= 60 %
	if got := rig.transitions(); got != "closed>open" {
		t.Fatalf("transitions %q, want closed>open at 7 of 10", got)
	}
	if ev := rig.lastEvent(); ev.WindowCalls != 10 || ev.WindowFailures != 7 || ev.Failures != 1 {
		t.Fatalf("event %+v, want 7 of 10 in the window, 1 consecutive", ev)
	}
	// The probe succeeds: the outage's outcomes do not count against the recovery.
	rig.timers.next(t, probeEvery).fire()
	call(false)
	call(true)
	call(true)
	if got := rig.transitions(); got != "closed>open open>half-open half-open>closed" {
		t.Fatalf("transitions %q, want closed again and staying closed", got)
	}
}

// An immediate attempt (not the first of its delivery) that meets an open breaker fails at
// once with ErrBreakerOpen, a Retry, without calling the handler, so Retry schedules the
// delayed retry; a delivery's first attempt waits as before.
func TestBreakerFailsImmediateAttemptsAtOnce(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 1, Immediate: 1})
	dep := &switchable{}
	dep.down.Store(true)
	h := breakerOver(cfg, dep.handle)
	_, _ = h(message.NewMessage("a", nil)) // opens
	second := message.NewMessage("second", nil)
	second.SetContext(millrace.WithAttempt(context.Background(), &millrace.Attempt{Number: 2, Delivery: 1, MaxAttempts: 5}))
	_, err := h(second)
	if !errors.Is(err, middleware.ErrBreakerOpen) || millrace.Classify(err, nil).Outcome != millrace.OutcomeRetry {
		t.Fatalf("immediate attempt: err %v, want a Retry wrapping ErrBreakerOpen", err)
	}
	first := message.NewMessage("first", nil)
	first.SetContext(millrace.WithAttempt(context.Background(), &millrace.Attempt{Number: 3, Delivery: 2, MaxAttempts: 5}))
	done := make(chan result, 1)
	start(h, first, done)
	rig.awaitWaiting(t, "first")
	if calls := dep.called(); len(calls) != 1 {
		t.Fatalf("calls %v, want only the one that opened the breaker", calls)
	}
}

// A contended message (another consumer holds its lease: millrace.ErrContended, which
// idempotency.ErrBusy wraps) is no word on the dependency: it neither opens the breaker nor
// resets its count.
func TestBreakerIgnoresContention(t *testing.T) {
	rig, cfg := newBreakerRig(middleware.BreakerConfig{Threshold: 2})
	busy := func(*message.Message) ([]*message.Message, error) {
		return nil, millrace.RetryAfter(fmt.Errorf("lease held: %w", millrace.ErrContended), time.Second)
	}
	down := func(*message.Message) ([]*message.Message, error) { return nil, millrace.Retry(errors.New("down")) }
	var which func(*message.Message) ([]*message.Message, error)
	wrapped := middleware.Breaker(cfg)(func(m *message.Message) ([]*message.Message, error) { return which(m) })
	for i := range 5 {
		which = busy
		if _, err := wrapped(message.NewMessage(fmt.Sprint("busy-", i), nil)); !errors.Is(err, millrace.ErrContended) {
			t.Fatalf("busy %d: err %v", i, err)
		}
	}
	if got := rig.transitions(); got != "" {
		t.Fatalf("contention changed the state: %q", got)
	}
	which = down
	_, _ = wrapped(message.NewMessage("down-1", nil))
	which = busy
	_, _ = wrapped(message.NewMessage("busy-between", nil)) // must not reset the count
	which = down
	_, _ = wrapped(message.NewMessage("down-2", nil))
	if got := rig.transitions(); got != "closed>open" {
		t.Fatalf("transitions %q, want the two failures around a contended message to open it", got)
	}
}
