package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
	"github.com/millrace/millrace/internal/testenv"
)

func dial(t *testing.T) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.DialConfig(brokerURL(), amqp091.Config{Dial: amqp091.DefaultDial(3 * time.Second)})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", brokerURL(), envURL, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// declare creates a classic durable queue for one test and deletes it when the test ends.
func declare(t *testing.T, conn *amqp091.Connection) string {
	t.Helper()
	name := fmt.Sprintf("millrace-test.dlstore.%08x.dlq", rand.Uint32())
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	})
	return name
}

func depth(t *testing.T, conn *amqp091.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

func TestStore(t *testing.T) {
	conn := dial(t)
	storetest.Run(t, func(t *testing.T) deadletter.Store {
		s, err := amqp.NewDeadLetterStore(conn, declare(t, conn), amqp.StoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{NoDedup: true})
}

// TestCloseRequeues: what a store held and did not delete is back in the queue after Close,
// with the same IDs in the next store; deleted messages are gone for good.
func TestCloseRequeues(t *testing.T) {
	conn := dial(t)
	q := declare(t, conn)
	ctx := context.Background()
	s1, err := amqp.NewDeadLetterStore(conn, q, amqp.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 4 {
		id, err := s1.Put(ctx, storetest.Sample(i, "orders", deadletter.Exhausted))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if n := depth(t, conn, q); n != 0 {
		t.Fatalf("%d messages ready while the store holds them, want 0", n)
	}
	if err := s1.Delete(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, conn, q, 3)
	s2, err := amqp.NewDeadLetterStore(conn, q, amqp.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for i, id := range ids {
		_, err := s2.Get(ctx, id)
		if i == 1 {
			if !errors.Is(err, deadletter.ErrNotFound) {
				t.Errorf("deleted %s: %v, want ErrNotFound", id, err)
			}
		} else if err != nil {
			t.Errorf("Get(%s) in a second store: %v (IDs must be stable across stores)", id, err)
		}
	}
}

// TestIdenticalMessagesGetDistinctIDs: the same record written twice is two entries.
func TestIdenticalMessagesGetDistinctIDs(t *testing.T) {
	conn := dial(t)
	s, err := amqp.NewDeadLetterStore(conn, declare(t, conn), amqp.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := storetest.Sample(7, "dup", deadletter.Exhausted)
	id1, err1 := s.Put(context.Background(), rec)
	id2, err2 := s.Put(context.Background(), rec)
	if err1 != nil || err2 != nil || id1 == id2 || id2 != id1+"-2" {
		t.Fatalf("IDs %q, %q (%v, %v); want x and x-2", id1, id2, err1, err2)
	}
	if id1 != amqp.ContentID(rec) {
		t.Errorf("ID %s, ContentID %s", id1, amqp.ContentID(rec))
	}
}

func TestMissingQueueAndLimit(t *testing.T) {
	conn := dial(t)
	if _, err := amqp.NewDeadLetterStore(conn, "millrace-test.no-such-queue.dlq", amqp.StoreConfig{}); !errors.Is(err, amqp.ErrQueueNotFound) {
		t.Fatalf("New on a missing queue: %v, want ErrQueueNotFound", err)
	}
	q := declare(t, conn)
	s, err := amqp.NewDeadLetterStore(conn, q, amqp.StoreConfig{MaxMessages: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := s.Put(context.Background(), storetest.Sample(i, "big", deadletter.Exhausted)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(context.Background(), storetest.Sample(3, "big", deadletter.Exhausted)); !errors.Is(err, amqp.ErrTooManyMessages) {
		t.Fatalf("third Put with MaxMessages 2: %v, want ErrTooManyMessages", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitDepth(t, conn, q, 3)
	if err := (amqp.StoreConfig{MaxMessages: -1}).Validate(); err == nil {
		t.Fatal("negative MaxMessages accepted")
	}
}

func waitDepth(t *testing.T, conn *amqp091.Connection, q string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := depth(t, conn, q)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d ready messages, want %d", q, n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
