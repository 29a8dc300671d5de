package redisstream_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/router"
)

// The examples need a Redis server and are compiled, not run.

// A consumer group on the stream "orders", on a go-redis client of the application's (which
// the adapter never closes): retries wait in a schedule beside the stream, dead letters go to
// "orders.dlq". ProcessingBudget (default 30 s) is the longest a consumer holds an entry
// before another may claim it; the router refuses a longer Budget, and leaves headroom under
// it for the retry or dead-letter write.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	a, err := redisstream.New(redisstream.Config{Client: client, Group: "billing", ProcessingBudget: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	policy := millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 0.2}}
	r, err := router.New(router.Config{Adapter: a, Policy: policy, Budget: 50 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	r.Handle("charge", "orders", func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
		fmt.Printf("order %s, attempt %d of %d\n", msg.UUID, at.Number, at.MaxAttempts)
		return nil
	})
	if err := r.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// Opening the adapter by URL, as the millrace command does: the path is the database, the
// query parameters set the Config fields of the same meaning; the adapter owns (and closes)
// the client it makes.
func Example_openByURL() {
	ctx := context.Background()
	ad, err := brokerurl.OpenAdapter(ctx, "redis://127.0.0.1:6379/0?group=billing&processing_budget=1m&dlq_suffix=.dead", brokerurl.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ad.Close()
	fmt.Println(ad.Capabilities().Broker, ad.DeadLetterTopic("orders"))
}
