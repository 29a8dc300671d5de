package sqs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/router"
)

// The examples need an SQS endpoint (AWS, or fauxqs, LocalStack, ElasticMQ locally) and are
// compiled, not run.

// A consumer of the queue "orders" on a local endpoint (dummy credentials; against AWS, set
// AWSConfig from config.LoadDefaultConfig instead). ProcessingBudget is the router's Budget,
// at least a second below the visibility timeout; a retry hides the message again for its
// delay (ChangeMessageVisibility), dead letters go to "orders-dlq".
func ExampleNew() {
	ctx := context.Background()
	a, err := sqs.New(sqs.Config{
		Endpoint:          "http://127.0.0.1:19324",
		VisibilityTimeout: time.Minute,
		ProcessingBudget:  50 * time.Second,
		CreateQueues:      true, // Provision creates missing queues (default: only verifies them)
	})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	policy := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Exponential{Initial: 10 * time.Second, Max: 10 * time.Minute}}
	if err := a.Provision(ctx, "orders", policy); err != nil {
		log.Fatal(err)
	}
	r, err := router.New(router.Config{Adapter: a, Policy: policy, Budget: 50 * time.Second})
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

// Opening the adapter by URL, as the millrace command does: sqs+http:// is a local endpoint
// with dummy credentials, sqs+https:// loads the SDK's default configuration; the query
// parameters set the Config fields of the same meaning.
func Example_openByURL() {
	ctx := context.Background()
	ad, err := brokerurl.OpenAdapter(ctx, "sqs+http://127.0.0.1:19324?processing_budget=50s&visibility=1m", brokerurl.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ad.Close()
	fmt.Println(ad.Capabilities().Broker, ad.DeadLetterTopic("orders"))
}
