package killbattery

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

// collector reads a topic's dead letters in the parent for the whole battery and keeps them,
// since reading a dead-letter destination may consume it (a queue) and the checks need every
// record, duplicates included.
type collector struct {
	sub    message.Subscriber
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	records []deadletter.Record
	errs    []error
}

func collectDeadLetters(sub message.Subscriber, topic string) (*collector, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("killbattery: subscribe to dead letters %q: %w", topic, err)
	}
	c := &collector{sub: sub, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for msg := range ch {
			rec, err := deadletter.FromMessage(msg)
			c.mu.Lock()
			if err != nil {
				c.errs = append(c.errs, fmt.Errorf("dead letter %s: %w", msg.UUID, err))
			} else {
				rec.Payload = append([]byte(nil), rec.Payload...)
				c.records = append(c.records, rec)
			}
			c.mu.Unlock()
			msg.Ack()
		}
	}()
	return c, nil
}

// snapshot returns the records read so far and the messages that did not decode as records.
func (c *collector) snapshot() ([]deadletter.Record, []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]deadletter.Record(nil), c.records...), append([]error(nil), c.errs...)
}

func (c *collector) close() {
	c.cancel()
	_ = c.sub.Close()
	<-c.done
}
