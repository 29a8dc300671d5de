package router_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// hookLog records every hook call.
type hookLog struct {
	mu      sync.Mutex
	retries map[string][]router.RetryEvent
	dead    map[string][]router.DeadLetterEvent
}

func newHookLog() *hookLog {
	return &hookLog{retries: map[string][]router.RetryEvent{}, dead: map[string][]router.DeadLetterEvent{}}
}

func (l *hookLog) onRetry(_ context.Context, msg *message.Message, ev router.RetryEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.retries[string(msg.Payload)] = append(l.retries[string(msg.Payload)], ev)
}

func (l *hookLog) onDeadLetter(_ context.Context, msg *message.Message, ev router.DeadLetterEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dead[string(msg.Payload)] = append(l.dead[string(msg.Payload)], ev)
}

// runRouter starts r and stops it when the test ends.
func runRouter(t *testing.T, r *router.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	<-r.Running()
	t.Cleanup(func() {
		_ = r.Close()
		cancel()
		<-done
	})
}

// waitSettled waits until topic has nothing waiting, in flight or scheduled.
func waitSettled(t *testing.T, a *memory.Adapter, topic string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for a.Outstanding(topic) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("topic %s not settled: %d outstanding", topic, a.Outstanding(topic))
		}
		time.Sleep(time.Millisecond)
	}
}

var errSMTP = errors.New("smtp down")

// TestHooksCalledOncePerRetryAndDeadLetter: 3 messages succeed at once, 2 fail twice then
// succeed, 1 asks RetryAfter once, 2 fail every attempt, 1 is malformed and 1 discarded with
// DeadLetterDiscards on, and 1 is discarded with no dead letter. OnRetry is called exactly once
// per retry with the failed attempt, the delay and the cause; OnDeadLetter exactly once per
// dead letter with the record as written.
func TestHooksCalledOncePerRetryAndDeadLetter(t *testing.T) {
	for _, dlDiscards := range []bool{true, false} {
		t.Run(fmt.Sprintf("DeadLetterDiscards=%v", dlDiscards), func(t *testing.T) {
			a := newMemory(t, memory.Config{})
			hooks := newHookLog()
			const delay = 5 * time.Millisecond
			r, err := router.New(router.Config{
				Adapter:            a,
				Policy:             millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(delay)},
				DeadLetterDiscards: dlDiscards,
				Logger:             discard,
				OnRetry:            hooks.onRetry,
				OnDeadLetter:       hooks.onDeadLetter,
			})
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			r.Handle("mailer", "mails", func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
				calls.Add(1)
				p := string(msg.Payload)
				switch {
				case strings.HasPrefix(p, "flaky") && at.Number <= 2:
					return errSMTP
				case p == "after" && at.Number == 1:
					return millrace.RetryAfter(errSMTP, 20*time.Millisecond)
				case strings.HasPrefix(p, "dead"):
					return fmt.Errorf("send %s: %w", p, errSMTP)
				case p == "malformed":
					return millrace.Malformed(errors.New("bad json"))
				case p == "discard":
					return millrace.Discard(errors.New("opted out"))
				}
				return nil
			})
			runRouter(t, r)
			payloads := []string{"ok1", "ok2", "ok3", "flaky1", "flaky2", "after", "dead1", "dead2", "malformed", "discard"}
			for _, p := range payloads {
				if err := a.Publish("mails", message.NewMessage(p+"-id", []byte(p))); err != nil {
					t.Fatal(err)
				}
			}
			waitSettled(t, a, "mails")

			hooks.mu.Lock()
			defer hooks.mu.Unlock()
			wantRetries := map[string][]int{"flaky1": {1, 2}, "flaky2": {1, 2}, "after": {1}, "dead1": {1, 2}, "dead2": {1, 2}}
			for p, want := range wantRetries {
				evs := hooks.retries[p]
				var got []int
				for _, ev := range evs {
					got = append(got, ev.Attempt.Number)
					wantDelay := delay
					if p == "after" {
						wantDelay = 20 * time.Millisecond
					}
					if ev.Delay != wantDelay || ev.Attempt.MaxAttempts != 3 || !errors.Is(ev.Err, errSMTP) || ev.FailedAt.IsZero() {
						t.Errorf("%s: retry event %+v, want delay %s, max 3, cause smtp down", p, ev, wantDelay)
					}
					var oe *millrace.OutcomeError
					if errors.As(ev.Err, &oe) {
						t.Errorf("%s: Err %v is still wrapped in its OutcomeError", p, ev.Err)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: OnRetry for attempts %v, want %v", p, got, want)
				}
			}
			if len(hooks.retries) != len(wantRetries) {
				t.Errorf("OnRetry called for %d messages, want %d: %v", len(hooks.retries), len(wantRetries), hooks.retries)
			}

			type wantDead struct {
				reason   deadletter.Reason
				attempts int
				errText  string
			}
			want := map[string]wantDead{
				"dead1":     {deadletter.Exhausted, 3, "send dead1: smtp down"},
				"dead2":     {deadletter.Exhausted, 3, "send dead2: smtp down"},
				"malformed": {deadletter.Malformed, 1, "bad json"},
			}
			if dlDiscards {
				want["discard"] = wantDead{deadletter.Discarded, 1, "opted out"}
			}
			if len(hooks.dead) != len(want) {
				t.Errorf("OnDeadLetter called for %d messages, want %d: %v", len(hooks.dead), len(want), hooks.dead)
			}
			written := map[string]deadletter.Record{}
			for _, m := range a.Peek(a.DeadLetterTopic("mails")) {
				rec, err := deadletter.FromMessage(m)
				if err != nil {
					t.Fatal(err)
				}
				written[string(rec.Payload)] = rec
			}
			if len(written) != len(want) {
				t.Errorf("%d dead letters written, want %d", len(written), len(want))
			}
			for p, w := range want {
				evs := hooks.dead[p]
				if len(evs) != 1 {
					t.Errorf("%s: OnDeadLetter called %d times, want 1", p, len(evs))
					continue
				}
				ev := evs[0]
				if ev.Record.Reason != w.reason || ev.Record.Attempts != w.attempts || ev.Record.LastError != w.errText ||
					ev.Err == nil || ev.Err.Error() != w.errText || ev.Record.Handler != "mailer" || ev.Record.OriginalTopic != "mails" {
					t.Errorf("%s: dead-letter event record %+v err %v, want %s after %d attempts: %q", p, ev.Record, ev.Err, w.reason, w.attempts, w.errText)
				}
				if rec := written[p]; rec.Reason != ev.Record.Reason || rec.Attempts != ev.Record.Attempts || rec.LastError != ev.Record.LastError {
					t.Errorf("%s: hook record %+v differs from the one written %+v", p, ev.Record, rec)
				}
			}
			if n := calls.Load(); n != 3+2*3+2+2*3+1+1 {
				t.Errorf("handler calls %d, want 19", n)
			}
		})
	}
}

// flakyAdapter is the memory adapter whose first failRetry retry schedules and first failDL
// dead-letter writes fail, as a broker that is briefly unreachable; it counts the writes that
// went through.
type flakyAdapter struct {
	*memory.Adapter
	failRetry, failDL     atomic.Int64
	retriesOK, deadOK     atomic.Int64
	retryCalls, deadCalls atomic.Int64
}

var errBrokerDown = errors.New("broker unreachable")

func (f *flakyAdapter) ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	f.retryCalls.Add(1)
	if f.failRetry.Add(-1) >= 0 {
		return 0, errBrokerDown
	}
	d, err := f.Adapter.ScheduleRetry(ctx, msg, req)
	if err == nil {
		f.retriesOK.Add(1)
	}
	return d, err
}

func (f *flakyAdapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	f.deadCalls.Add(1)
	if f.failDL.Add(-1) >= 0 {
		return errBrokerDown
	}
	err := f.Adapter.DeadLetter(ctx, msg, rec)
	if err == nil {
		f.deadOK.Add(1)
	}
	return err
}

// TestHooksNotCalledWhenWriteFails: the first retry schedule and the first two dead-letter
// writes fail; the original is nacked and delivered again each time. The hooks are called only
// for the writes that went through, each after its write.
func TestHooksNotCalledWhenWriteFails(t *testing.T) {
	f := &flakyAdapter{Adapter: newMemory(t, memory.Config{})}
	f.failRetry.Store(1)
	f.failDL.Store(2)
	var retryHooks, deadHooks atomic.Int64
	var early atomic.Bool
	r, err := router.New(router.Config{
		Adapter: f,
		Policy:  millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(5 * time.Millisecond)},
		Logger:  discard,
		OnRetry: func(context.Context, *message.Message, router.RetryEvent) {
			if retryHooks.Add(1) > f.retriesOK.Load() {
				early.Store(true)
			}
		},
		OnDeadLetter: func(_ context.Context, _ *message.Message, ev router.DeadLetterEvent) {
			if deadHooks.Add(1) > f.deadOK.Load() {
				early.Store(true)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("h", "t", func(context.Context, *message.Message, millrace.Attempt) error { return errSMTP })
	runRouter(t, r)
	if err := f.Publish("t", message.NewMessage("m", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, f.Adapter, "t")
	if f.deadOK.Load() != 1 {
		t.Fatalf("dead letters written %d, want 1", f.deadOK.Load())
	}
	if got := f.retryCalls.Load(); got != 2 {
		t.Errorf("ScheduleRetry calls %d, want 2 (one failed, one written)", got)
	}
	if got := f.deadCalls.Load(); got != 3 {
		t.Errorf("DeadLetter calls %d, want 3 (two failed, one written)", got)
	}
	if retryHooks.Load() != 1 || deadHooks.Load() != 1 {
		t.Errorf("OnRetry %d, OnDeadLetter %d calls; want 1 and 1 (only for the writes that went through)", retryHooks.Load(), deadHooks.Load())
	}
	if early.Load() {
		t.Error("a hook ran before its write had gone through")
	}
}

// lockedBuffer is a bytes.Buffer safe for the router's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPanickingHookDoesNotBreakHandling: both hooks panic; the message is still retried,
// then dead-lettered and acknowledged once (no redelivery, no second dead letter), and each
// panic is logged at Error with the hook's name.
func TestPanickingHookDoesNotBreakHandling(t *testing.T) {
	a := newMemory(t, memory.Config{})
	var logs lockedBuffer
	var retryHooks, deadHooks atomic.Int64
	r, err := router.New(router.Config{
		Adapter: a,
		Policy:  millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(5 * time.Millisecond)},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		OnRetry: func(context.Context, *message.Message, router.RetryEvent) {
			retryHooks.Add(1)
			panic("alerting client nil")
		},
		OnDeadLetter: func(context.Context, *message.Message, router.DeadLetterEvent) {
			deadHooks.Add(1)
			panic(errors.New("audit table missing"))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	r.Handle("h", "t", func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errSMTP
	})
	runRouter(t, r)
	if err := a.Publish("t", message.NewMessage("m-1", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, a, "t")
	time.Sleep(20 * time.Millisecond) // a redelivery after a wrong nack would show here
	if n := a.Outstanding("t"); n != 0 || calls.Load() != 2 || a.Len(a.DeadLetterTopic("t")) != 1 {
		t.Fatalf("outstanding %d, handler calls %d, dead letters %d; want 0, 2, 1", n, calls.Load(), a.Len(a.DeadLetterTopic("t")))
	}
	if retryHooks.Load() != 1 || deadHooks.Load() != 1 {
		t.Fatalf("hook calls %d, %d; want 1, 1", retryHooks.Load(), deadHooks.Load())
	}
	out := logs.String()
	for _, want := range []string{
		`level=ERROR msg="millrace: hook panicked; the message is handled as without it" handler=h topic=t broker=memory hook=OnRetry message_uuid=m-1 panic="alerting client nil"`,
		`level=ERROR msg="millrace: hook panicked; the message is handled as without it" handler=h topic=t broker=memory hook=OnDeadLetter message_uuid=m-1 panic="audit table missing"`,
		"stack=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
