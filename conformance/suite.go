package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// Run runs every conformance test against the adapters h makes. Tests run in parallel, each on
// its own adapter and topic.
func Run(t *testing.T, h Harness) {
	opts := h.Options().withDefaults()
	tests := []struct {
		name string
		fn   func(*testing.T, Harness, Options)
	}{
		{"AttemptsCountAcrossRetries", testAttemptsCountAcrossRetries},
		{"RetryWaitsForItsDelay", testRetryWaitsForItsDelay},
		{"ExhaustedIsDeadLetteredOnce", testExhaustedIsDeadLetteredOnce},
		{"BinaryPayloadSurvivesDeadLetter", testBinaryPayloadSurvivesDeadLetter},
		{"DiscardIsNotRetried", testDiscardIsNotRetried},
		{"DiscardCanBeDeadLettered", testDiscardCanBeDeadLettered},
		{"MalformedIsDeadLetteredAtOnce", testMalformedIsDeadLetteredAtOnce},
		{"WaitingRetryDoesNotBlockOthers", testWaitingRetryDoesNotBlockOthers},
		{"DeadLetterFailureLeavesOriginalUnacked", testDeadLetterFailureLeavesOriginalUnacked},
		{"RetryFailureLeavesOriginalUnacked", testRetryFailureLeavesOriginalUnacked},
		{"PanicIsRetried", testPanicIsRetried},
		{"BudgetBoundsHandler", testBudgetBoundsHandler},
		{"InvalidPolicyIsRefused", testInvalidPolicyIsRefused},
		{"DelayAboveAdapterMaximumIsRefused", testDelayAboveAdapterMaximumIsRefused},
		{"ImmediateThenDelayedRetries", testImmediateThenDelayedRetries},
		{"MaxElapsedGivesUp", testMaxElapsedGivesUp},
		{"ImmediateAttemptsShareTheBudget", testImmediateAttemptsShareTheBudget},
		{"BreakerHoldsDuringOutage", testBreakerHoldsDuringOutage},
		{"TelemetryCountsAKnownWorkload", testTelemetryCountsAKnownWorkload},
		{"TraceContextSurvivesRetries", testTraceContextSurvivesRetries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h, opts)
		})
	}
	t.Run("Hostile", func(t *testing.T) {
		t.Parallel()
		RunHostile(t, h)
	})
}

func newMsg(payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set("x-conformance", "kept")
	return msg
}

// testAttemptsCountAcrossRetries: the first delivery is attempt 1; a message that fails twice
// then succeeds is seen with attempts 1, 2, 3 and handled successfully exactly once.
func testAttemptsCountAcrossRetries(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	caps := f.adapter.Capabilities()
	f.run(router.Config{Policy: f.policy(5, opts.Delay)}, func(_ context.Context, _ *message.Message, a millrace.Attempt) error {
		if a.Number < 3 {
			return fmt.Errorf("transient failure on attempt %d", a.Number)
		}
		return nil
	})
	msg := newMsg(`{"id":"attempts"}`)
	f.publish(msg)
	calls := f.waitCalls("3 attempts", func(c []call) bool { return len(c) >= 3 })
	time.Sleep(opts.Delay + opts.Tolerance + opts.Quiet)
	calls = f.snapshot()
	if len(calls) != 3 {
		t.Fatalf("want exactly 3 handler calls, got %d: %s", len(calls), describe(calls))
	}
	for i, c := range calls {
		if c.uuid != msg.UUID {
			t.Errorf("call %d: uuid %q, want %q", i, c.uuid, msg.UUID)
		}
		if c.attempt.Number != i+1 {
			t.Errorf("call %d: attempt %d, want %d", i, c.attempt.Number, i+1)
		}
		if c.attempt.MaxAttempts != 5 {
			t.Errorf("call %d: MaxAttempts %d, want 5", i, c.attempt.MaxAttempts)
		}
		if c.attempt.Broker != caps.Broker {
			t.Errorf("call %d: Broker %q, want %q", i, c.attempt.Broker, caps.Broker)
		}
		if c.attempt.OriginalTopic != f.topic {
			t.Errorf("call %d: OriginalTopic %q, want %q", i, c.attempt.OriginalTopic, f.topic)
		}
	}
	if src := calls[0].attempt.Source; src == millrace.SourceHeader {
		t.Errorf("first delivery: Source %s, want native or none", src)
	}
	if caps.NativeAttemptCount && calls[0].attempt.NativeCount != 1 {
		t.Errorf("first delivery: NativeCount %d, want 1 (adapter declares a native counter)", calls[0].attempt.NativeCount)
	}
	if caps.CarriesLastError && !strings.Contains(calls[1].attempt.LastError, "attempt 1") {
		t.Errorf("attempt 2: LastError %q, want the error of attempt 1", calls[1].attempt.LastError)
	}
	if recs, _ := dl.snapshot(); len(recs) != 0 {
		t.Fatalf("a message that succeeded was dead-lettered: %+v", recs)
	}
}

// testRetryWaitsForItsDelay: a retry is not redelivered before its delay and arrives within
// delay + tolerance.
func testRetryWaitsForItsDelay(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	f.run(router.Config{Policy: f.policy(2, opts.Delay)}, func(_ context.Context, _ *message.Message, a millrace.Attempt) error {
		if a.Number == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	f.publish(newMsg(`{"id":"delay"}`))
	calls := f.waitCalls("2 attempts", func(c []call) bool { return len(c) >= 2 })
	gapFromStart := calls[1].start.Sub(calls[0].start)
	gapFromFailure := calls[1].start.Sub(calls[0].end)
	if gapFromStart < opts.Delay-opts.ClockSlack {
		t.Fatalf("retry arrived %s after the first attempt started; want >= delay %s (slack %s)", gapFromStart, opts.Delay, opts.ClockSlack)
	}
	if gapFromFailure > opts.Delay+opts.Tolerance {
		t.Fatalf("retry arrived %s after the failure; want <= delay %s + tolerance %s", gapFromFailure, opts.Delay, opts.Tolerance)
	}
	t.Logf("delay %s: retry arrived %s after the failure", opts.Delay, gapFromFailure)
}

// testExhaustedIsDeadLetteredOnce: max attempts N gives exactly N handler calls, then exactly
// one dead-letter record whose payload is byte-identical and whose metadata carries the context.
func testExhaustedIsDeadLetteredOnce(t *testing.T, h Harness, opts Options) {
	const maxAttempts = 3
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	f.run(router.Config{Policy: f.policy(maxAttempts, opts.Delay)}, func(_ context.Context, _ *message.Message, a millrace.Attempt) error {
		return fmt.Errorf("dependency down (attempt %d): %w", a.Number, &dependencyError{status: 503})
	})
	payload := `{"id":"exhausted","text":"naïve café ✓"}`
	msg := newMsg(payload)
	before := time.Now()
	f.publish(msg)
	recs := f.waitDeadLetters(dl, 1)
	calls := f.snapshot()
	if len(calls) != maxAttempts {
		t.Fatalf("want exactly %d handler calls, got %d: %s", maxAttempts, len(calls), describe(calls))
	}
	rec := recs[0]
	checkRecord(t, rec, f, msg.UUID, []byte(payload), deadletter.Exhausted, maxAttempts)
	if !strings.Contains(rec.LastError, fmt.Sprintf("attempt %d", maxAttempts)) {
		t.Errorf("LastError %q, want the error of attempt %d", rec.LastError, maxAttempts)
	}
	if want := []string{"*fmt.wrapError", "*conformance.dependencyError"}; !slices.Equal(rec.ErrorTypes, want) {
		t.Errorf("ErrorTypes %q, want %q: the Go types of the last error's chain", rec.ErrorTypes, want)
	}
	if rec.PanicStack != "" {
		t.Errorf("PanicStack %q on a dead letter that did not panic", rec.PanicStack)
	}
	if rec.FirstFailureAt.Before(before.Add(-time.Second)) || rec.LastFailureAt.Before(rec.FirstFailureAt) {
		t.Errorf("failure times out of order: first %s, last %s, published %s", rec.FirstFailureAt, rec.LastFailureAt, before)
	}
	if got := rec.LastFailureAt.Sub(rec.FirstFailureAt); got < time.Duration(maxAttempts-1)*opts.Delay-opts.ClockSlack {
		t.Errorf("first to last failure %s, want >= %d delays of %s", got, maxAttempts-1, opts.Delay)
	}
	time.Sleep(opts.Delay + opts.Tolerance)
	if n := len(f.snapshot()); n != maxAttempts {
		t.Fatalf("handler called %d times after dead-lettering, want %d", n, maxAttempts)
	}
}

// checkRecord asserts what every dead-letter record must carry.
func checkRecord(t *testing.T, rec deadletter.Record, f *fixture, uuid string, payload []byte, reason deadletter.Reason, attempts int) {
	t.Helper()
	if !bytes.Equal(rec.Payload, payload) {
		t.Errorf("dead-letter payload %q, want byte-identical %q", rec.Payload, payload)
	}
	if rec.Reason != reason {
		t.Errorf("reason %q, want %q", rec.Reason, reason)
	}
	if rec.Attempts != attempts {
		t.Errorf("attempts %d, want %d", rec.Attempts, attempts)
	}
	if rec.UUID != uuid {
		t.Errorf("uuid %q, want %q", rec.UUID, uuid)
	}
	if rec.OriginalTopic != f.topic {
		t.Errorf("original topic %q, want %q", rec.OriginalTopic, f.topic)
	}
	if rec.Handler != f.handler {
		t.Errorf("handler %q, want %q", rec.Handler, f.handler)
	}
	if caps := f.adapter.Capabilities(); rec.Broker != caps.Broker {
		t.Errorf("broker %q, want %q", rec.Broker, caps.Broker)
	}
	if rec.LastError == "" {
		t.Error("last error is empty")
	}
	if rec.FirstFailureAt.IsZero() || rec.LastFailureAt.IsZero() {
		t.Errorf("failure times missing: first %v, last %v", rec.FirstFailureAt, rec.LastFailureAt)
	}
	if got := rec.Metadata["x-conformance"]; got != "kept" {
		t.Errorf("original metadata x-conformance = %q, want %q", got, "kept")
	}
}

// testBinaryPayloadSurvivesDeadLetter: bytes that are not UTF-8 reach the dead letter unchanged.
func testBinaryPayloadSurvivesDeadLetter(t *testing.T, h Harness, opts Options) {
	if opts.TextPayloadsOnly {
		t.Skip("harness declares TextPayloadsOnly: the broker carries only UTF-8 text bodies")
	}
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	f.run(router.Config{Policy: f.policy(1, opts.Delay)}, func(context.Context, *message.Message, millrace.Attempt) error {
		return errors.New("cannot handle binary")
	})
	payload := []byte{0x00, 0xff, 0xfe, '{', 0x80, '\n', 0x00}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.Metadata.Set("x-conformance", "kept")
	f.publish(msg)
	recs := f.waitDeadLetters(dl, 1)
	checkRecord(t, recs[0], f, msg.UUID, payload, deadletter.Exhausted, 1)
}

// testDiscardIsNotRetried: Discard means one call, no retry, no dead letter by default.
func testDiscardIsNotRetried(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	f.run(router.Config{Policy: f.policy(5, opts.Delay)}, func(context.Context, *message.Message, millrace.Attempt) error {
		return millrace.Discard(errors.New("user opted out"))
	})
	f.publish(newMsg(`{"id":"discard"}`))
	f.waitCalls("1 call", func(c []call) bool { return len(c) >= 1 })
	time.Sleep(opts.Delay + opts.Tolerance + opts.Quiet)
	if n := len(f.snapshot()); n != 1 {
		t.Fatalf("want exactly 1 handler call for a Discard, got %d", n)
	}
	if recs, _ := dl.snapshot(); len(recs) != 0 {
		t.Fatalf("a Discard was dead-lettered without DeadLetterDiscards: %+v", recs)
	}
}

// testDiscardCanBeDeadLettered: with DeadLetterDiscards, a Discard is one call and one record.
func testDiscardCanBeDeadLettered(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	f.run(router.Config{Policy: f.policy(5, opts.Delay), DeadLetterDiscards: true}, func(context.Context, *message.Message, millrace.Attempt) error {
		return millrace.Discard(errors.New("message expired"))
	})
	payload := `{"id":"discard-dlq"}`
	msg := newMsg(payload)
	f.publish(msg)
	recs := f.waitDeadLetters(dl, 1)
	checkRecord(t, recs[0], f, msg.UUID, []byte(payload), deadletter.Discarded, 1)
	if n := len(f.snapshot()); n != 1 {
		t.Fatalf("want exactly 1 handler call, got %d", n)
	}
}

// testMalformedIsDeadLetteredAtOnce: Malformed means one call and a dead letter with the raw bytes.
func testMalformedIsDeadLetteredAtOnce(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	f.run(router.Config{Policy: f.policy(5, opts.Delay)}, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		return millrace.Malformed(fmt.Errorf("invalid JSON: %q", msg.Payload))
	})
	payload := `{"id": "malformed", "unterminated`
	msg := newMsg(payload)
	f.publish(msg)
	recs := f.waitDeadLetters(dl, 1)
	checkRecord(t, recs[0], f, msg.UUID, []byte(payload), deadletter.Malformed, 1)
	if n := len(f.snapshot()); n != 1 {
		t.Fatalf("want exactly 1 handler call, got %d", n)
	}
}

// testWaitingRetryDoesNotBlockOthers: messages published after a failed one are handled
// before its retry is due.
func testWaitingRetryDoesNotBlockOthers(t *testing.T, h Harness, opts Options) {
	const others = 10
	delay := 4 * opts.Delay
	f := newFixture(t, h, opts)
	var first string
	f.run(router.Config{Policy: f.policy(2, delay)}, func(_ context.Context, msg *message.Message, a millrace.Attempt) error {
		if msg.UUID == first && a.Number == 1 {
			return errors.New("first message fails once")
		}
		return nil
	})
	head := newMsg(`{"id":"head"}`)
	first = head.UUID
	f.publish(head)
	f.waitCalls("the head's first attempt", func(c []call) bool { return len(callsFor(c, first)) >= 1 })
	for i := range others {
		f.publish(newMsg(fmt.Sprintf(`{"id":"other-%d"}`, i)))
	}
	calls := f.waitCalls("head retried and others handled", func(c []call) bool {
		return len(callsFor(c, first)) >= 2 && len(c) >= others+2
	})
	headCalls := callsFor(calls, first)
	retryAt := headCalls[1].start
	for _, c := range calls {
		if c.uuid == first {
			continue
		}
		if !c.start.Before(retryAt) {
			t.Errorf("message %s handled at %s, after the head's retry at %s: the waiting retry blocked it",
				c.uuid, c.start.Format(time.StampMilli), retryAt.Format(time.StampMilli))
		}
	}
	if len(calls) != others+2 {
		t.Fatalf("want %d handler calls, got %d: %s", others+2, len(calls), describe(calls))
	}
}

// testDeadLetterFailureLeavesOriginalUnacked: when the dead-letter write fails, the original is
// not acknowledged: it is delivered again and dead-lettered exactly once.
func testDeadLetterFailureLeavesOriginalUnacked(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	faulty := &faultyAdapter{Adapter: f.adapter, deadLetterFaults: 1}
	dl := f.watchDeadLetters()
	f.run(router.Config{Adapter: faulty, Policy: f.policy(1, opts.Delay)}, func(context.Context, *message.Message, millrace.Attempt) error {
		return errors.New("always fails")
	})
	payload := `{"id":"dlq-fault"}`
	msg := newMsg(payload)
	f.publish(msg)
	recs := f.waitDeadLetters(dl, 1)
	if n, _ := faulty.counts(); n != 2 {
		t.Fatalf("want 2 dead-letter writes (1 injected failure, then the redelivery's), got %d", n)
	}
	checkRecord(t, recs[0], f, msg.UUID, []byte(payload), deadletter.Exhausted, 1)
	if n := len(f.snapshot()); n != 1 {
		t.Fatalf("handler called %d times, want 1: the redelivery after the failed write is past MaxAttempts and must go straight to the dead letter", n)
	}
}

// testRetryFailureLeavesOriginalUnacked: when scheduling the retry fails, the original is not
// acknowledged: it is delivered again and, the dependency healthy, handled once successfully.
func testRetryFailureLeavesOriginalUnacked(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	faulty := &faultyAdapter{Adapter: f.adapter, retryFaults: 1}
	dl := f.watchDeadLetters()
	var failures int
	f.run(router.Config{Adapter: faulty, Policy: f.policy(5, opts.Delay)}, func(context.Context, *message.Message, millrace.Attempt) error {
		if failures == 0 {
			failures++
			return errors.New("fails once")
		}
		return nil
	})
	f.publish(newMsg(`{"id":"retry-fault"}`))
	f.waitCalls("2 calls", func(c []call) bool { return len(c) >= 2 })
	time.Sleep(opts.Delay + opts.Tolerance + opts.Quiet)
	if n := len(f.snapshot()); n != 2 {
		t.Fatalf("want exactly 2 handler calls (failure, then redelivery of the unacked original), got %d", n)
	}
	if _, r := faulty.counts(); r != 1 {
		t.Fatalf("want 1 retry schedule (the injected failure), got %d", r)
	}
	if recs, _ := dl.snapshot(); len(recs) != 0 {
		t.Fatalf("unexpected dead letters: %+v", recs)
	}
}

// testPanicIsRetried: a panic is recovered and retried like a Retry; one that panics on every
// attempt is dead-lettered with the panic's type and stack, which survive the broker.
func testPanicIsRetried(t *testing.T, h Harness, opts Options) {
	const always = `{"id":"panic-always"}`
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	f.run(router.Config{Policy: f.policy(3, opts.Delay)}, func(_ context.Context, msg *message.Message, a millrace.Attempt) error {
		if string(msg.Payload) == always {
			panicsEveryTime(a.Number)
		}
		if a.Number == 1 {
			panic("handler bug")
		}
		return nil
	})
	once, every := newMsg(`{"id":"panic"}`), newMsg(always)
	f.publish(once, every)
	recs := f.waitDeadLetters(dl, 1)
	calls := f.waitCalls("2 calls of the message that panics once", func(c []call) bool { return len(callsOf(c, once.UUID)) >= 2 })
	calls = callsOf(calls, once.UUID)
	if calls[1].attempt.Number != 2 {
		t.Fatalf("attempt after panic %d, want 2", calls[1].attempt.Number)
	}
	if f.adapter.Capabilities().CarriesLastError && !strings.Contains(calls[1].attempt.LastError, "handler bug") {
		t.Errorf("LastError %q, want the panic value", calls[1].attempt.LastError)
	}

	rec := recs[0]
	checkRecord(t, rec, f, every.UUID, []byte(always), deadletter.Exhausted, 3)
	if !strings.Contains(rec.LastError, "panic: always (attempt 3)") {
		t.Errorf("LastError %q, want the last panic's value", rec.LastError)
	}
	if !slices.Contains(rec.ErrorTypes, "*millrace.PanicError") {
		t.Errorf("ErrorTypes %q, want *millrace.PanicError among them", rec.ErrorTypes)
	}
	lines := strings.Split(rec.PanicStack, "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "goroutine ") || !strings.HasPrefix(lines[1], "panic(") ||
		!strings.Contains(rec.PanicStack, "conformance.panicsEveryTime(") || !strings.HasPrefix(lines[2], "\t") {
		t.Errorf("PanicStack does not hold the panic's stack, lines and tabs intact, from the panic down to the handler:\n%s", rec.PanicStack)
	}
	if n := len(rec.Fields()[deadletter.KeyPanicStack]); n > deadletter.MaxPanicStackBytes {
		t.Errorf("PanicStack field %d bytes, bound %d", n, deadletter.MaxPanicStackBytes)
	}
}

// panicsEveryTime is the frame the dead letter's stack must show.
func panicsEveryTime(attempt int) {
	panic(fmt.Sprintf("always (attempt %d)", attempt))
}

// dependencyError is an error type of the suite's own, for the dead letter's ErrorTypes.
type dependencyError struct{ status int }

func (e *dependencyError) Error() string { return fmt.Sprintf("status %d", e.status) }

func callsOf(calls []call, uuid string) []call {
	var out []call
	for _, c := range calls {
		if c.uuid == uuid {
			out = append(out, c)
		}
	}
	return out
}

// testBudgetBoundsHandler: the processing budget is a context deadline, set the budget after
// the attempt begins; a handler that overruns it ends at that deadline and is retried.
func testBudgetBoundsHandler(t *testing.T, h Harness, opts Options) {
	const budget = 100 * time.Millisecond
	f := newFixture(t, h, opts)
	deadlines := make(chan time.Time, 1)
	f.run(router.Config{Policy: f.policy(3, opts.Delay), Budget: budget}, func(ctx context.Context, _ *message.Message, a millrace.Attempt) error {
		dl, ok := ctx.Deadline()
		if !ok {
			return millrace.Discard(errors.New("no deadline in the handler context"))
		}
		if a.Number == 1 {
			deadlines <- dl
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	f.publish(newMsg(`{"id":"budget"}`))
	calls := f.waitCalls("2 calls", func(c []call) bool { return len(c) >= 2 })
	// The deadline is set just before the handler's call is recorded as begun, so it lies at
	// most the budget after that start (and less only by the time between the two).
	dl := <-deadlines
	if d := dl.Sub(calls[0].start); d > budget || d < budget-opts.Tolerance {
		t.Fatalf("deadline %s after the first attempt began, want the budget %s", d, budget)
	}
	if late := calls[0].end.Sub(dl); late < 0 || late > opts.Tolerance {
		t.Fatalf("first attempt ended %s after its deadline, want 0 to %s", late, opts.Tolerance)
	}
	if calls[1].attempt.Number != 2 {
		t.Fatalf("attempt after timeout %d, want 2", calls[1].attempt.Number)
	}
}

// testInvalidPolicyIsRefused: a policy with no attempts or a negative delay is refused at
// start-up with an error that names the field.
func testInvalidPolicyIsRefused(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	cases := []struct {
		policy millrace.RetryPolicy
		field  string
	}{
		{millrace.RetryPolicy{MaxAttempts: 0, Backoff: millrace.Fixed(opts.Delay)}, "RetryPolicy.MaxAttempts"},
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(-time.Second)}, "RetryPolicy.Backoff"},
	}
	for _, c := range cases {
		_, err := router.New(router.Config{Adapter: f.adapter, Policy: c.policy})
		if !errors.Is(err, millrace.ErrInvalidConfig) {
			t.Fatalf("policy %+v: err %v, want ErrInvalidConfig", c.policy, err)
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Fatalf("policy %+v: error %q does not name %s", c.policy, err, c.field)
		}
	}
}

// testDelayAboveAdapterMaximumIsRefused: a delay the broker cannot wait is refused at start-up
// with the field, the value and the limit.
func testDelayAboveAdapterMaximumIsRefused(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	caps := f.adapter.Capabilities()
	if caps.MaxDelay == 0 {
		t.Skipf("adapter %s declares no maximum delay", caps.Broker)
	}
	tooLong := caps.MaxDelay + time.Second
	_, err := router.New(router.Config{Adapter: f.adapter, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(tooLong)}})
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
		t.Fatalf("delay %s above maximum %s: err %v, want ErrPolicyExceedsAdapter", tooLong, caps.MaxDelay, err)
	}
	for _, want := range []string{"RetryPolicy.Backoff", tooLong.String(), caps.MaxDelay.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
