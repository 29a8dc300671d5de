package middleware_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/middleware"
)

// hookChain is chain with hooks on Retry and Poison.
func hookChain(r *recorder, onRetry middleware.OnRetryFunc, onDL middleware.OnDeadLetterFunc, dlDiscards bool, h message.HandlerFunc) message.HandlerFunc {
	mws := []message.HandlerMiddleware{
		middleware.Poison(r, middleware.PoisonConfig{DeadLetterDiscards: dlDiscards, OnDeadLetter: onDL}),
		middleware.Attempt(r, policy),
		middleware.Retry(r, middleware.RetryConfig{Policy: policy, OnRetry: onRetry}),
		middleware.Classify(nil),
		middleware.Recover(),
	}
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

func TestOnRetryAfterNativeNack(t *testing.T) {
	r := &recorder{number: 2, disp: millrace.NackOriginal}
	calls := 0
	onRetry := func(_ context.Context, msg *message.Message, ev middleware.RetryEvent) {
		calls++
		select {
		case <-msg.Nacked():
		default:
			t.Error("OnRetry ran before the original was nacked")
		}
		if ev.Attempt.Number != 2 || ev.Delay != r.retries[0].Delay || !errors.Is(ev.Err, errDown) || ev.FailedAt != r.retries[0].FailedAt {
			t.Errorf("event %+v, request %+v", ev, r.retries[0])
		}
	}
	if _, err := hookChain(r, onRetry, nil, false, failing())(msgWithCtx()); err != nil || calls != 1 {
		t.Fatalf("err %v, OnRetry calls %d; want nil and 1", err, calls)
	}
}

func TestNoHookOnFailedWriteOrPlainDiscard(t *testing.T) {
	fail := func(context.Context, *message.Message, middleware.RetryEvent) { t.Error("OnRetry called") }
	failDL := func(context.Context, *message.Message, middleware.DeadLetterEvent) { t.Error("OnDeadLetter called") }

	r := &recorder{number: 1, retryErr: errors.New("retry topic missing")}
	if _, err := hookChain(r, fail, failDL, false, failing())(msgWithCtx()); !errors.Is(err, millrace.ErrRetryPublishFailed) {
		t.Fatalf("err = %v", err)
	}
	r = &recorder{number: 3, dlErr: errors.New("dlq missing")}
	if _, err := hookChain(r, fail, failDL, false, failing())(msgWithCtx()); !errors.Is(err, millrace.ErrDeadLetterFailed) {
		t.Fatalf("err = %v", err)
	}
	discard := func(*message.Message) ([]*message.Message, error) { return nil, millrace.Discard(errDown) }
	if _, err := hookChain(&recorder{number: 1}, fail, failDL, false, discard)(msgWithCtx()); err != nil {
		t.Fatalf("err = %v", err)
	}
}

func TestOnDeadLetterOverLimitDelivery(t *testing.T) {
	r := &recorder{number: 7}
	var got []middleware.DeadLetterEvent
	onDL := func(_ context.Context, _ *message.Message, ev middleware.DeadLetterEvent) { got = append(got, ev) }
	handler := func(*message.Message) ([]*message.Message, error) {
		t.Error("handler called past MaxAttempts")
		return nil, nil
	}
	if _, err := hookChain(r, nil, onDL, false, handler)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(r.deadLetter) != 1 || got[0].Record.Reason != r.deadLetter[0].Reason ||
		got[0].Record.Attempts != r.deadLetter[0].Attempts || got[0].Err == nil || got[0].Err.Error() != r.deadLetter[0].LastError {
		t.Fatalf("events %+v, written %+v", got, r.deadLetter)
	}
}
