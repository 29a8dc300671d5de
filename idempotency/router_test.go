package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/router"
)

// TestForRouterTakesEachHandlersSettings: the guard given once on the router is made from
// each handler's own policy, so the handler whose policy has a retry window shorter than the
// lease is refused by Run, by name, and the router's other handler is not.
func TestForRouterTakesEachHandlersSettings(t *testing.T) {
	a, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	store, _ := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	r, err := router.New(router.Config{
		Adapter:     a,
		Policy:      millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)},
		Idempotency: idempotency.ForRouter(idempotency.Config{Store: store}),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *message.Message, millrace.Attempt) error { return nil }
	r.Handle("patient", "a", h)
	r.Handle("hasty", "b", h, router.WithPolicy(millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(10 * time.Millisecond)}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if !errors.Is(err, millrace.ErrInvalidConfig) || !strings.Contains(err.Error(), `handler "hasty"`) || !strings.Contains(err.Error(), "LeaseTTL") {
		t.Fatalf("Run: %v, want the lease of handler \"hasty\" refused", err)
	}
	if strings.Contains(err.Error(), "patient") {
		t.Fatalf("Run refused the valid handler too: %v", err)
	}
}

// TestForRouterRunsEachMessageOncePerHandler: one message UUID reaches two handlers guarded by
// one store, and then each of them a second time (a redelivery). Each handler runs it once:
// the keys are per handler, and the second delivery finds the handler's own done marker.
func TestForRouterRunsEachMessageOncePerHandler(t *testing.T) {
	a, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	store, _ := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	guard := idempotency.ForRouter(idempotency.Config{Store: store, LeaseTTL: time.Second})
	r, err := router.New(router.Config{
		Adapter:     a,
		Policy:      millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)},
		Budget:      500 * time.Millisecond,
		Idempotency: guard,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	deadline := map[string]time.Duration{}
	handler := func(name string) router.HandlerFunc {
		return func(ctx context.Context, _ *message.Message, _ millrace.Attempt) error {
			mu.Lock()
			defer mu.Unlock()
			runs[name]++
			if d, ok := ctx.Deadline(); ok {
				deadline[name] = time.Until(d)
			}
			return nil
		}
	}
	r.Handle("email", "orders.email", handler("email"))
	r.Handle("sms", "orders.sms", handler("sms"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { _ = r.Close(); cancel(); <-done }()
	<-r.Running()
	for range 2 {
		for _, topic := range []string{"orders.email", "orders.sms"} {
			if err := a.Publish(topic, message.NewMessage("order-1", []byte("x"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitDone := time.Now().Add(10 * time.Second)
	for {
		e, _ := guard.Stats("email")
		s, _ := guard.Stats("sms")
		if e.Completed+s.Completed == 2 && e.Duplicates+s.Duplicates == 2 && a.Outstanding("orders.email")+a.Outstanding("orders.sms") == 0 {
			break
		}
		if time.Now().After(waitDone) {
			t.Fatalf("not settled: email %+v, sms %+v", e, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["email"] != 1 || runs["sms"] != 1 {
		t.Fatalf("runs %v, want each handler once", runs)
	}
	for name, d := range deadline {
		if d <= 0 || d > 500*time.Millisecond {
			t.Errorf("%s: deadline %s away, want within the router's 500ms budget", name, d)
		}
	}
	if _, ok := guard.Stats("nobody"); ok {
		t.Error("Stats of an unknown handler reported ok")
	}
}
