package cutbattery

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// AckAnyway plants the defect the battery exists to catch, for an adapter package's test that
// the battery fails it (TestCutBatteryCatchesAckWithoutDeadLetter): every adapter Target
// connects reports each dead-letter write as written, so the router acks the original even when
// the write failed in a cut, and the message is lost. Settle, when positive, replaces the
// system's Bound.Settle (such a test has one cut and need not wait out the whole bound).
type AckAnyway struct {
	Target
	Settle    time.Duration
	swallowed atomic.Int64
}

// Connect connects Target and wraps its adapter.
func (b *AckAnyway) Connect(ctx context.Context, t testing.TB, topic string, proxied []string) (System, error) {
	sys, err := b.Target.Connect(ctx, t, topic, proxied)
	sys.Adapter = &ackingAnyway{Adapter: sys.Adapter, swallowed: &b.swallowed}
	if b.Settle > 0 {
		sys.Bound.Settle = b.Settle
	}
	return sys, err
}

// Swallowed is how many failed dead-letter writes were reported as written: zero means the
// cuts missed every dead-letter write, and the test proves nothing.
func (b *AckAnyway) Swallowed() int64 { return b.swallowed.Load() }

type ackingAnyway struct {
	millrace.Adapter
	swallowed *atomic.Int64
}

func (a *ackingAnyway) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	if err := a.Adapter.DeadLetter(ctx, msg, rec); err != nil {
		a.swallowed.Add(1)
	}
	return nil
}
