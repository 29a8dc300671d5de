package cutbattery

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

// deadLetterLog collects the dead letters of the run's topic as they are written.
type deadLetterLog struct {
	mu      sync.Mutex
	records []deadletter.Record
	errs    []error
	last    time.Time
	done    chan struct{}
}

// collect reads ch until it closes, acking every message.
func collect(ch <-chan *message.Message) *deadLetterLog {
	d := &deadLetterLog{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for msg := range ch {
			rec, err := deadletter.FromMessage(msg)
			d.mu.Lock()
			if err != nil {
				d.errs = append(d.errs, err)
			} else {
				rec.Payload = append([]byte(nil), rec.Payload...)
				d.records = append(d.records, rec)
			}
			d.last = time.Now()
			d.mu.Unlock()
			msg.Ack()
		}
	}()
	return d
}

// snapshot returns the records and decoding errors so far, and when the last one came.
func (d *deadLetterLog) snapshot() ([]deadletter.Record, []error, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deadletter.Record(nil), d.records...), append([]error(nil), d.errs...), d.last
}

// has reports which UUIDs have a dead letter.
func (d *deadLetterLog) has() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]bool, len(d.records))
	for _, r := range d.records {
		out[r.UUID] = true
	}
	return out
}

// subscribeDeadLetters starts collecting topic's dead letters through sub.
func subscribeDeadLetters(ctx context.Context, sub message.Subscriber, topic string) (*deadLetterLog, error) {
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	return collect(ch), nil
}
