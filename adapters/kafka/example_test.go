package kafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/router"
)

// The examples need Kafka brokers and are compiled, not run.

// A consumer group on the topic "orders": Provision creates the topic, one retry topic per
// distinct delay ("orders.retry.10s", "orders.retry.60s") and "orders.dlq"; a record's offset
// is committed with its retry or dead letter in one transaction (Config.AtLeastOnce: after).
func ExampleNew() {
	ctx := context.Background()
	a, err := kafka.New(kafka.Config{
		Brokers:       []string{"127.0.0.1:9092"},
		ConsumerGroup: "billing",
		Partitions:    3, // of the topics Provision creates
	})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{10 * time.Second, time.Minute}}
	if err := a.Provision(ctx, "orders", policy); err != nil {
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

// Opening the adapter by URL, as the millrace command does: the brokers are the host list,
// the query parameters set the Config fields of the same meaning (user and password, for
// SASL, go in the URL's userinfo, never in a parameter).
func Example_openByURL() {
	ctx := context.Background()
	ad, err := brokerurl.OpenAdapter(ctx, "kafka://127.0.0.1:9092,127.0.0.1:9093?group=billing&partitions=3&read_timeout=10s", brokerurl.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ad.Close()
	fmt.Println(ad.Capabilities().Broker, ad.DeadLetterTopic("orders"))
}
