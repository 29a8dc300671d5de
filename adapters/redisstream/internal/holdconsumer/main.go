// Command holdconsumer is the victim of the redisstream SIGKILL test: it joins a consumer group
// through a millrace router, prints "HOLDING <uuid> <attempt> <entry id>" for the first message
// it gets, and then holds it forever, until the test kills the process.
//
// Usage: holdconsumer -stream S -group G -delay D -budget B (Redis from $MILLRACE_REDIS_URL).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/router"
)

func main() {
	stream := flag.String("stream", "", "stream to consume")
	group := flag.String("group", "", "consumer group")
	delay := flag.Duration("delay", time.Second, "retry delay of the policy")
	budget := flag.Duration("budget", 300*time.Millisecond, "processing budget")
	flag.Parse()

	url := os.Getenv("MILLRACE_REDIS_URL")
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := redisstream.New(redisstream.Config{
		URL: url, Group: *group, Consumer: "victim", Window: 1,
		ProcessingBudget: *budget, ReclaimInterval: 50 * time.Millisecond, ReadBlock: 50 * time.Millisecond, Logger: logger,
	})
	if err != nil {
		log.Fatal(err)
	}
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(*delay)}, Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	r.Handle("victim", *stream, func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
		fmt.Printf("HOLDING %s %d %s\n", msg.UUID, at.Number, at.NativeID)
		select {} // hold the entry until SIGKILL
	})
	if err := r.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
