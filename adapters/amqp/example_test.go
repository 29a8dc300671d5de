package amqp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/router"
)

// The examples need a RabbitMQ broker and are compiled, not run.

// A consumer of the quorum queue "orders", bound to the exchange "shop" for the "order.#"
// routing keys. Retries wait in one TTL queue per distinct delay (Provision declares them),
// so the backoff has no jitter; dead letters go to "orders.dlq".
func ExampleNew() {
	ctx := context.Background()
	a, err := amqp.New(ctx, amqp.Config{
		URL:       "amqp://guest:guest@127.0.0.1:5672/",
		QueueType: amqp.Quorum, // x-delivery-count bounds crash loops too
		Topics:    map[string]amqp.Topic{"orders": {Exchange: "shop", BindingKeys: []string{"order.#"}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	policy := millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Delays{10 * time.Second, time.Minute, 10 * time.Minute}}
	if err := a.Provision(ctx, "orders", policy); err != nil { // exchange, queue, retry tiers, DLQ
		log.Fatal(err)
	}
	r, err := router.New(router.Config{Adapter: a, Policy: policy})
	if err != nil {
		log.Fatal(err)
	}
	r.Handle("charge", "orders", func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
		fmt.Printf("order %s, attempt %d of %d\n", msg.UUID, at.Number, at.MaxAttempts)
		return nil
	})
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Opening the adapter by URL, as the millrace command does: the query parameters set the
// Config fields of the same meaning.
func Example_openByURL() {
	ctx := context.Background()
	ad, err := brokerurl.OpenAdapter(ctx, "amqp://guest:guest@127.0.0.1:5672/?queue_type=quorum&delivery_limit=10&prefetch=1", brokerurl.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ad.Close()
	fmt.Println(ad.Capabilities().Broker, ad.DeadLetterTopic("orders"))
}
