// Command crashconsumer is the child process of TestKilledConsumerLosesNothing: it consumes one
// topic through a millrace router, prints "HOLDING <uuid> <attempt>" when the handler has a
// message, and then blocks without acknowledging it until it is killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/router"
)

func main() {
	url := flag.String("url", amqp.DefaultURL, "AMQP URI")
	topic := flag.String("topic", "", "topic (work queue) to consume")
	queueType := flag.String("queue-type", "classic", "classic or quorum")
	flag.Parse()
	if err := run(*url, *topic, amqp.QueueType(*queueType)); err != nil {
		fmt.Fprintln(os.Stderr, "crashconsumer:", err)
		os.Exit(1)
	}
}

func run(url, topic string, qt amqp.QueueType) error {
	ctx := context.Background()
	a, err := amqp.New(ctx, amqp.Config{URL: url, QueueType: qt})
	if err != nil {
		return err
	}
	r, err := router.New(router.Config{
		Adapter: a,
		Policy:  millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	r.Handle("crash", topic, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		fmt.Printf("HOLDING %s %d\n", msg.UUID, at.Number)
		select {} // hold the message unacknowledged until SIGKILL
	})
	return r.Run(ctx)
}
