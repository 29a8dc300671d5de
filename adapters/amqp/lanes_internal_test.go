package amqp

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/internal/testenv"
)

// TestConcurrentConfirmedPublishesShareLanes: 64 confirmed publishes at once, every other one
// to a key no queue is bound for, share at most maxLanes confirm channels, and each gets its
// own answer: the unroutable ones ErrUnroutable (a return is never taken for another publish's
// success, which would ack an original whose retry or dead letter the broker dropped), the
// others nil.
func TestConcurrentConfirmedPublishesShareLanes(t *testing.T) {
	ctx := context.Background()
	url := testenv.Getenv("MILLRACE_AMQP_URL", DefaultURL)
	a, err := New(ctx, Config{URL: url})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", url, "MILLRACE_AMQP_URL", err)
	}
	topic := "lanes." + time.Now().Format("150405.000000000")
	t.Cleanup(func() { cleanupDeclared(t, a, url) })
	ch, err := a.subConn.channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.declareBase(ch, topic); err != nil { // its DLX, with the DLQ bound as dlqKey
		t.Fatal(err)
	}
	_ = ch.Close()
	dlx := a.names(topic).dlx
	const n = 64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := dlqKey // bound to the DLQ
			if i%2 == 1 {
				key = "nobody"
			}
			errs[i] = a.pubs.publishConfirmed(ctx, dlx, key, amqp091.Publishing{
				MessageId: "m-" + strconv.Itoa(i), Body: []byte("same body"), DeliveryMode: amqp091.Persistent,
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if unroutable := i%2 == 1; unroutable != errors.Is(err, ErrUnroutable) || (!unroutable && err != nil) {
			t.Errorf("publish %d (unroutable %v): %v", i, unroutable, err)
		}
	}
	a.pubs.mu.Lock()
	lanes := len(a.pubs.lanes)
	a.pubs.mu.Unlock()
	if lanes > maxLanes {
		t.Errorf("%d confirm channels for %d concurrent publishes, want at most %d", lanes, n, maxLanes)
	}
}
