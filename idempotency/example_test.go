package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/router"
)

// A push-notification handler guarded by the lease, sending to each device at most once.
// In production the store is idempotency.NewRedisStore(client, idempotency.StoreOptions{Prefix:
// "notification:"}) and Wrap is added with router.AddMiddleware(mw.Wrap).
func Example() {
	store, _ := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	mw, err := idempotency.New(idempotency.Config{
		Store:  store,
		Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)},
		// LeaseTTL 2 min, Budget 104 s, SendCutoff 10 s, DoneTTL 7 days: the defaults.
	})
	if err != nil {
		panic(err)
	}
	down := true
	send := func(_ context.Context, device string) error {
		if device == "tablet" && down {
			return millrace.Retry(errors.New("provider 503"))
		}
		fmt.Println("sent to", device)
		return nil
	}
	handler := mw.Wrap(func(msg *message.Message) ([]*message.Message, error) {
		lease, _ := idempotency.LeaseFrom(msg.Context())
		return nil, idempotency.FanOut(msg.Context(), lease, []string{"phone", "tablet"}, send)
	})

	_, err = handler(message.NewMessage("msg-1", nil))
	fmt.Println("attempt 1:", millrace.Classify(err, nil).Outcome)
	down = false
	_, err = handler(message.NewMessage("msg-1", nil))
	fmt.Println("attempt 2:", err)
	_, err = handler(message.NewMessage("msg-1", nil))
	fmt.Println("redelivery:", err, "duplicates:", mw.Stats().Duplicates)
	// Output:
	// sent to phone
	// attempt 1: RETRY
	// sent to tablet
	// attempt 2: <nil>
	// redelivery: <nil> duplicates: 1
}

// The lease given once, on the router: each handler's lease is made from that handler's
// policy, budget and classifier. The same message delivered twice runs once.
func ExampleForRouter() {
	a, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	store, _ := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	guard := idempotency.ForRouter(idempotency.Config{Store: store})
	r, err := router.New(router.Config{
		Adapter:     a,
		Policy:      millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)},
		Idempotency: guard,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	r.Handle("push", "push", func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		fmt.Printf("sending %s\n", msg.Payload)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	for range 2 {
		if err := a.Publish("push", message.NewMessage("order-7", []byte("order 7 shipped"))); err != nil {
			panic(err)
		}
		for a.Outstanding("push") > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	st, _ := guard.Stats("push")
	fmt.Printf("completed %d, duplicates %d\n", st.Completed, st.Duplicates)
	_ = r.Close()
	// Output:
	// sending order 7 shipped
	// completed 1, duplicates 1
}
