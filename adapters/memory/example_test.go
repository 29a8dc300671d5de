package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
)

// The memory adapter is also a plain watermill Publisher and Subscriber: a topic is one queue
// its subscriptions share, each holding one message at a time until it is acked. Len counts
// the messages waiting; Outstanding adds those in flight and those scheduled for a retry.
func ExampleNew() {
	a, err := memory.New(memory.Config{DeadLetterSuffix: ".dead", MaxDelay: time.Hour})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	caps := a.Capabilities()
	fmt.Println(caps.Broker, caps.PerMessageDelay, caps.MaxDelay, a.DeadLetterTopic("orders"))

	if err := a.Publish("orders", message.NewMessage("id-1", []byte("first")), message.NewMessage("id-2", []byte("second"))); err != nil {
		panic(err)
	}
	fmt.Println("waiting:", a.Len("orders"), "outstanding:", a.Outstanding("orders"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := a.Subscriber().Subscribe(ctx, "orders")
	if err != nil {
		panic(err)
	}
	for range 2 {
		m := <-msgs
		fmt.Println("received", string(m.Payload))
		m.Ack()
	}
	for a.Outstanding("orders") > 0 { // the last ack settles asynchronously
		time.Sleep(time.Millisecond)
	}
	fmt.Println("waiting:", a.Len("orders"), "outstanding:", a.Outstanding("orders"))
	// Output:
	// memory true 1h0m0s orders.dead
	// waiting: 2 outstanding: 2
	// received first
	// received second
	// waiting: 0 outstanding: 0
}

// A policy longer than Config.MaxDelay is refused when the router starts, naming the limit;
// a negative MaxDelay is refused by New.
func ExampleConfig_Validate() {
	_, err := memory.New(memory.Config{MaxDelay: -time.Second})
	fmt.Println(err)

	a, err := memory.New(memory.Config{MaxDelay: time.Minute})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	p := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(5 * time.Minute)}
	fmt.Println(p.ValidateFor(a.Capabilities()))
	// Output:
	// millrace: invalid configuration: memory.Config.MaxDelay = -1s: must not be negative (0 means 24h)
	// millrace: invalid configuration: RetryPolicy.Backoff = 5m0s: delay exceeds the memory adapter's maximum delay 1m0s
}
