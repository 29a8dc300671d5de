package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/middleware"
)

// deliveries is a broker stand-in for the immediate-attempt tests: it decodes the delivery
// number it is set to (as every adapter's DecodeAttempt counts deliveries), with a fixed first
// attempt time, and records retries and dead letters.
type deliveries struct {
	recorder
	first time.Time
}

func (d *deliveries) DecodeAttempt(msg *message.Message) millrace.Attempt {
	a := d.recorder.DecodeAttempt(msg)
	a.FirstAttemptAt = d.first
	return a
}

// seen is what one handler call saw.
type seen struct {
	number, delivery int
	deadline         time.Time
	hasDeadline      bool
}

// immediateChain is the router's stack with a shared budget; clock is the Retry's Now.
func immediateChain(d *deliveries, p millrace.RetryPolicy, budget time.Duration, clock func() time.Time, h message.HandlerFunc) message.HandlerFunc {
	mws := []message.HandlerMiddleware{
		middleware.Poison(d, middleware.PoisonConfig{Logger: quiet}),
		middleware.Attempt(d, p),
		middleware.Retry(d, middleware.RetryConfig{Policy: p, Budget: budget, Logger: quiet, Now: clock}),
		middleware.Classify(nil),
		middleware.Budget(budget),
		middleware.Recover(),
	}
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// recording returns a handler that records each call and returns results[i] on call i (the
// last one for later calls).
func recording(calls *[]seen, results ...error) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		a := millrace.AttemptFrom(msg)
		dl, ok := msg.Context().Deadline()
		*calls = append(*calls, seen{number: a.Number, delivery: a.Delivery, deadline: dl, hasDeadline: ok})
		return nil, results[min(len(*calls), len(results))-1]
	}
}

// With Immediate 1 and MaxAttempts 5, delivery d (the broker's count) covers attempts
// 2d-1 and 2d: 1,2 | 3,4 | 5, then one dead letter recording 5 attempts; a delivery past
// them is dead-lettered without a call, recording 5, not 6.
func TestImmediateAttemptsNumberedFromDeliveries(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 5, Immediate: 1, Backoff: millrace.Delays{time.Second, 10 * time.Second}}
	var calls []seen
	d := &deliveries{}
	for delivery, want := range map[int][]int{1: {1, 2}, 2: {3, 4}, 3: {5}} {
		calls, d.retries, d.deadLetter = nil, nil, nil
		d.number = delivery
		msg := msgWithCtx()
		if _, err := immediateChain(d, p, 0, nil, recording(&calls, errDown))(msg); err != nil {
			t.Fatalf("delivery %d: err = %v", delivery, err)
		}
		if len(calls) != len(want) {
			t.Fatalf("delivery %d: %d calls %+v, want attempts %v", delivery, len(calls), calls, want)
		}
		for i, c := range calls {
			if c.number != want[i] || c.delivery != delivery {
				t.Errorf("delivery %d call %d: attempt %d of delivery %d, want attempt %d", delivery, i, c.number, c.delivery, want[i])
			}
		}
		if delivery < 3 {
			if len(d.retries) != 1 || len(d.deadLetter) != 0 {
				t.Fatalf("delivery %d: %d retries, %d dead letters, want 1 retry", delivery, len(d.retries), len(d.deadLetter))
			}
			req := d.retries[0]
			wantDelay := []time.Duration{time.Second, 10 * time.Second}[delivery-1]
			if req.Attempt.Number != want[1] || req.Attempt.Delivery != delivery || req.Attempt.NextDelivery() != delivery+1 || req.Delay != wantDelay {
				t.Errorf("delivery %d: retry of attempt %d (delivery %d, next %d) after %s, want attempt %d, next delivery %d, after %s (the Backoff counts delayed retries)",
					delivery, req.Attempt.Number, req.Attempt.Delivery, req.Attempt.NextDelivery(), req.Delay, want[1], delivery+1, wantDelay)
			}
			continue
		}
		if len(d.retries) != 0 || len(d.deadLetter) != 1 || d.deadLetter[0].Attempts != 5 || d.deadLetter[0].Reason != deadletter.Exhausted {
			t.Fatalf("last delivery: retries %d, dead letters %+v, want one exhausted record of 5 attempts", len(d.retries), d.deadLetter)
		}
	}
	// A redelivery after a failed dead-letter write: delivery 4 would start at attempt 7.
	calls, d.deadLetter, d.number = nil, nil, 4
	if _, err := immediateChain(d, p, 0, nil, recording(&calls, errDown))(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 || len(d.deadLetter) != 1 || d.deadLetter[0].Attempts != 5 {
		t.Fatalf("delivery past the limit: %d calls, dead letters %+v, want none and one record of 5 attempts", len(calls), d.deadLetter)
	}
}

// Every immediate attempt of a delivery runs under the one deadline set before the first: the
// inner Budget's WithTimeout keeps it. Each attempt has its own Attempt in the context, and
// the message context is the delivery's own again afterwards, with the last attempt for
// Poison.
func TestImmediateAttemptsShareOneDeadline(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 4, Immediate: 2, Backoff: millrace.Fixed(time.Second)}
	var calls []seen
	d := &deliveries{recorder: recorder{number: 1}}
	msg := msgWithCtx()
	var ctxs []context.Context
	h := recording(&calls, errDown, errDown, nil)
	_, err := immediateChain(d, p, time.Hour, nil, func(m *message.Message) ([]*message.Message, error) {
		ctxs = append(ctxs, m.Context())
		return h(m)
	})(msg)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 || len(d.retries) != 0 {
		t.Fatalf("calls %+v, retries %d: want attempts 1, 2, 3 (success) and no retry", calls, len(d.retries))
	}
	for i, c := range calls {
		if !c.hasDeadline || !c.deadline.Equal(calls[0].deadline) {
			t.Errorf("attempt %d: deadline %v (set %v), want the first attempt's %v", c.number, c.deadline, c.hasDeadline, calls[0].deadline)
		}
		if c.number != i+1 {
			t.Errorf("call %d: attempt %d", i, c.number)
		}
		// A context kept from an earlier attempt still says its own attempt.
		if a, _ := millrace.AttemptFromContext(ctxs[i]); a.Number != i+1 {
			t.Errorf("context of call %d says attempt %d", i, a.Number)
		}
	}
	if _, ok := msg.Context().Deadline(); ok {
		t.Error("the message context keeps the delivery's deadline after the attempts")
	}
	if a := millrace.AttemptFrom(msg); a.Number != 3 {
		t.Errorf("message context after the attempts: attempt %d, want the last, 3", a.Number)
	}
}

// Immediate attempts stop at the first outcome that is not a plain Retry.
func TestImmediateAttemptsStopOnOtherOutcomes(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 5, Immediate: 3, Backoff: millrace.Fixed(time.Second)}
	for _, c := range []struct {
		name    string
		result  error
		retries int
	}{
		{"discard", millrace.Discard(errors.New("opted out")), 0},
		{"malformed", millrace.Malformed(errors.New("not JSON")), 0},
		{"retry after", millrace.RetryAfter(errors.New("429"), time.Minute), 1}, // its delay is asked for, at once
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls []seen
			d := &deliveries{recorder: recorder{number: 1}}
			if _, err := immediateChain(d, p, 0, nil, recording(&calls, c.result))(msgWithCtx()); err != nil {
				t.Fatal(err)
			}
			if len(calls) != 1 || len(d.retries) != c.retries {
				t.Fatalf("%d calls, %d retries: want 1 call and %d retries", len(calls), len(d.retries), c.retries)
			}
			if c.retries == 1 && d.retries[0].Delay != time.Minute {
				t.Fatalf("RetryAfter delay %s, want 1m", d.retries[0].Delay)
			}
		})
	}
}

// No immediate attempt starts once the delivery's deadline has passed: the last failure is
// then retried later, or, on the last delivery, dead-lettered with the attempts it had.
func TestImmediateAttemptsStopAtTheDeadline(t *testing.T) {
	overrun := func(m *message.Message) ([]*message.Message, error) {
		<-m.Context().Done() // the handler uses up the budget
		return nil, m.Context().Err()
	}
	p := millrace.RetryPolicy{MaxAttempts: 4, Immediate: 1, Backoff: millrace.Fixed(time.Second)}
	d := &deliveries{recorder: recorder{number: 1}}
	calls := 0
	h := func(m *message.Message) ([]*message.Message, error) { calls++; return overrun(m) }
	if _, err := immediateChain(d, p, time.Millisecond, nil, h)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || len(d.retries) != 1 || d.retries[0].Attempt.Number != 1 || d.retries[0].Attempt.NextDelivery() != 2 {
		t.Fatalf("%d calls, retries %+v: want 1 call, then a delayed retry of attempt 1 for delivery 2", calls, d.retries)
	}
	// Delivery 2 (attempts 3 and 4) is the last: cut short, it is exhausted after attempt 3.
	d = &deliveries{recorder: recorder{number: 2}}
	calls = 0
	if _, err := immediateChain(d, p, time.Millisecond, nil, h)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || len(d.retries) != 0 || len(d.deadLetter) != 1 || d.deadLetter[0].Attempts != 3 {
		t.Fatalf("%d calls, %d retries, dead letters %+v: want 1 call and one record of 3 attempts", calls, len(d.retries), d.deadLetter)
	}
}

// A shutdown (the message's own context done) stops the immediate attempts; the failure is
// then handled as without them.
func TestImmediateAttemptsStopOnShutdown(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 5, Immediate: 3, Backoff: millrace.Fixed(time.Second)}
	d := &deliveries{recorder: recorder{number: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	msg := msgWithCtx()
	msg.SetContext(ctx)
	var calls []seen
	h := recording(&calls, errDown)
	if _, err := immediateChain(d, p, 0, nil, func(m *message.Message) ([]*message.Message, error) {
		cancel() // the router closes during the first attempt
		return h(m)
	})(msg); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || len(d.retries) != 1 {
		t.Fatalf("%d calls, %d retries: want 1 call and the delayed retry", len(calls), len(d.retries))
	}
}

// MaxElapsed: a retry that would start after FirstAttemptAt+MaxElapsed is not made.
func TestMaxElapsedExhausts(t *testing.T) {
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := millrace.RetryPolicy{MaxAttempts: 10, Backoff: millrace.Fixed(20 * time.Second), MaxElapsed: time.Minute}
	for _, c := range []struct {
		name      string
		policy    millrace.RetryPolicy
		at        time.Duration // the failure's time after the first attempt
		calls     int
		exhausted bool
	}{
		{"within", p, 40 * time.Second, 1, false}, // 40s + 20s = 1m: not past
		{"past", p, 41 * time.Second, 1, true},    // 41s + 20s > 1m
		{"immediate past", millrace.RetryPolicy{MaxAttempts: 10, Immediate: 2, Backoff: p.Backoff, MaxElapsed: time.Minute}, 61 * time.Second, 1, true},
		{"immediate within, delayed past", millrace.RetryPolicy{MaxAttempts: 10, Immediate: 2, Backoff: p.Backoff, MaxElapsed: time.Minute}, 50 * time.Second, 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &deliveries{recorder: recorder{number: 2}, first: first}
			var calls []seen
			clock := func() time.Time { return first.Add(c.at) }
			if _, err := immediateChain(d, c.policy, 0, clock, recording(&calls, errDown))(msgWithCtx()); err != nil {
				t.Fatal(err)
			}
			if len(calls) != c.calls {
				t.Fatalf("%d calls, want %d", len(calls), c.calls)
			}
			if !c.exhausted {
				if len(d.retries) != 1 || len(d.deadLetter) != 0 {
					t.Fatalf("%d retries, %d dead letters, want the retry", len(d.retries), len(d.deadLetter))
				}
				return
			}
			if len(d.retries) != 0 || len(d.deadLetter) != 1 || d.deadLetter[0].Reason != deadletter.Exhausted || d.deadLetter[0].Attempts != calls[len(calls)-1].number {
				t.Fatalf("%d retries, dead letters %+v, want one exhausted record of the last attempt, %d", len(d.retries), d.deadLetter, calls[len(calls)-1].number)
			}
		})
	}
}

// The ExhaustedError of an elapsed limit says so, with the numbers.
func TestMaxElapsedErrorSaysWhy(t *testing.T) {
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := millrace.RetryPolicy{MaxAttempts: 10, Backoff: millrace.Fixed(20 * time.Second), MaxElapsed: time.Minute}
	d := &deliveries{recorder: recorder{number: 2}, first: first}
	msg := msgWithCtx()
	msg.SetContext(millrace.WithAttempt(context.Background(), &millrace.Attempt{Number: 2, Delivery: 2, MaxAttempts: 10, FirstAttemptAt: first}))
	retry := middleware.Retry(d, middleware.RetryConfig{Policy: p, Logger: quiet, Now: func() time.Time { return first.Add(45 * time.Second) }})
	_, err := retry(middleware.Classify(nil)(failing()))(msg)
	var ex *millrace.ExhaustedError
	if !errors.As(err, &ex) || ex.Attempts != 2 || ex.MaxElapsed != time.Minute || ex.Elapsed != 45*time.Second || ex.NextDelay != 20*time.Second || !errors.Is(err, errDown) {
		t.Fatalf("err = %#v, want an ExhaustedError of attempt 2 naming the elapsed limit", err)
	}
	if !strings.Contains(err.Error(), "elapsed limit 1m0s: 45s since the first attempt + next delay 20s") {
		t.Errorf("error %q does not say why", err)
	}
}

// A FirstAttemptAt in the future (a skewed broker clock, a forged header) is taken as now; a
// first delivery without one gets now; a later one without one stays unknown.
func TestFirstAttemptAtClamped(t *testing.T) {
	for _, c := range []struct {
		name     string
		first    time.Time
		delivery int
		unknown  bool
	}{
		{"future", time.Now().Add(time.Hour), 2, false},
		{"absent on the first delivery", time.Time{}, 1, false},
		{"absent later", time.Time{}, 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &deliveries{recorder: recorder{number: c.delivery}, first: c.first}
			var got millrace.Attempt
			before := time.Now()
			h := middleware.Attempt(d, millrace.RetryPolicy{MaxAttempts: 3})(func(m *message.Message) ([]*message.Message, error) {
				got = millrace.AttemptFrom(m)
				return nil, nil
			})
			if _, err := h(msgWithCtx()); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			if c.unknown {
				if !got.FirstAttemptAt.IsZero() {
					t.Fatalf("FirstAttemptAt %v, want it left unknown", got.FirstAttemptAt)
				}
				return
			}
			if got.FirstAttemptAt.Before(before) || got.FirstAttemptAt.After(after) {
				t.Fatalf("FirstAttemptAt %v, want the decode's now (between %v and %v)", got.FirstAttemptAt, before, after)
			}
		})
	}
}

// Immediate 0 keeps the old numbering: the delivery number is the attempt number.
func TestNoImmediateKeepsNumbering(t *testing.T) {
	d := &deliveries{recorder: recorder{number: 2}}
	var calls []seen
	if _, err := immediateChain(d, policy, 0, nil, recording(&calls, errDown))(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].number != 2 || calls[0].delivery != 2 || len(d.retries) != 1 || d.retries[0].Attempt.NextDelivery() != 3 {
		t.Fatalf("calls %+v, retries %+v", calls, d.retries)
	}
}

// Poison's dead-letter line says when the elapsed limit, not MaxAttempts, ended the retries.
func TestMaxElapsedDeadLetterIsLogged(t *testing.T) {
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := millrace.RetryPolicy{MaxAttempts: 10, Backoff: millrace.Fixed(20 * time.Second), MaxElapsed: time.Minute}
	d := &deliveries{recorder: recorder{number: 2}, first: first}
	var logs bytes.Buffer
	h := middleware.Poison(d, middleware.PoisonConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})(
		middleware.Attempt(d, p)(
			middleware.Retry(d, middleware.RetryConfig{Policy: p, Logger: quiet, Now: func() time.Time { return first.Add(45 * time.Second) }})(
				middleware.Classify(nil)(failing()))))
	if _, err := h(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(d.deadLetter) != 1 || d.deadLetter[0].LastError != errDown.Error() {
		t.Fatalf("dead letters %+v, want one with the handler's error", d.deadLetter)
	}
	if want := `elapsed_limit="1m0s: 45s since the first attempt + next delay 20s"`; !strings.Contains(logs.String(), want) {
		t.Errorf("log %q does not contain %q", logs.String(), want)
	}
}
