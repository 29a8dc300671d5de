package nats_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/nats"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/plan"
	"github.com/millrace/millrace/router"
)

// The examples but Example_plan (offline) need a NATS server with JetStream (nats-server -js)
// and are compiled, not run; examples/nats-jetstream is a program that runs against one.

// A consumer of one subject: retries by NakWithDelay, dead letters to "orders.dlq".
func ExampleNew() {
	a, err := nats.New(nats.Config{
		URL:              "nats://127.0.0.1:4222",
		Durable:          "billing",        // the durable pull consumer every instance joins
		AckWait:          2 * time.Minute,  // JetStream redelivers an unacknowledged message after it
		ProcessingBudget: 50 * time.Second, // below AckWait/2; the router's Budget may not exceed it
	})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(5 * time.Minute)}
	if err := a.Provision(context.Background(), "orders", policy); err != nil { // streams and consumer
		log.Fatal(err)
	}
	r, err := router.New(router.Config{Adapter: a, Policy: policy, Budget: 45 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	r.Handle("charge", "orders", func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
		// at.Number is JetStream's NumDelivered: a crash of the consumer counts as an attempt.
		fmt.Printf("order %s, attempt %d of %d\n", msg.UUID, at.Number, at.MaxAttempts)
		return nil
	})
	if err := r.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// Opening the adapter by URL, as the millrace command does: the query parameters set the
// Config fields of the same meaning.
func Example_openByURL() {
	ctx := context.Background()
	ad, err := brokerurl.OpenAdapter(ctx, "nats://127.0.0.1:4222?durable=billing&ack_wait=2m&processing_budget=50s", brokerurl.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ad.Close()
	a := ad.(*nats.Adapter)
	fmt.Println(a.Config().AckWait, a.DeadLetterTopic("orders"))
}

// Reading the dead letters of "orders": its "orders.dlq" stream as a deadletter.Store, whose
// IDs are stream sequences.
func ExampleNewDeadLetterStore() {
	ctx := context.Background()
	a, err := nats.New(nats.Config{URL: "nats://127.0.0.1:4222", Durable: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	dlq := a.DeadLetterTopic("orders")
	store, err := nats.NewDeadLetterStore(a.JetStream(), dlq, nats.StreamName(dlq))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	entries, _, err := store.List(ctx, deadletter.Filter{Reason: deadletter.Exhausted}, deadletter.Page{Limit: 20})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Printf("seq %s: %s after %d attempts: %s (%d bytes)\n", e.ID, e.Record.UUID, e.Record.Attempts, e.Record.LastError, len(e.Record.Payload))
	}
}

// Planning a policy on NATS before it ships, offline, as `millrace plan` does (PlanOptions
// Check compares the live streams and consumer too, as `millrace plan --check`): the
// topology, the give-up time, and the rule a 50 s budget breaks on the default AckWait.
func Example_plan() {
	ctx := context.Background()
	spec := plan.Spec{Topic: "orders", Budget: 50 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)}}
	r, err := brokerurl.Plan(ctx, spec, []string{"nats://127.0.0.1:4222?durable=billing&ack_wait=2m"}, brokerurl.PlanOptions{})
	if err != nil {
		log.Fatal(err)
	}
	b := r.Brokers[0]
	for _, res := range b.Topology {
		fmt.Println(res.Kind, res.Name)
	}
	fmt.Println("give-up:", b.GiveUp, "ok:", r.OK)

	r, err = brokerurl.Plan(ctx, spec, []string{"nats://127.0.0.1:4222?durable=billing"}, brokerurl.PlanOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ok:", r.OK)
	for _, p := range r.Problems() {
		fmt.Println(p)
	}
	// Output:
	// stream orders
	// consumer billing
	// stream orders_2Edlq
	// give-up: 4m0s to 11m30s ok: true
	// ok: false
	// nats://127.0.0.1:4222?durable=billing: millrace: invalid configuration: nats.Config.ProcessingBudget = 50s: must be below half of AckWait (30s): a message can wait one budget in the pull buffer, and JetStream would hand a message whose handler still runs to another consumer
}
