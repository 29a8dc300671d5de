package nats

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance/killbattery"
	"github.com/millrace/millrace/internal/testenv"
)

// killTarget runs the kill battery on the test server. A killed consumer's messages come back
// after AckWait (3 s), far above the longest handler call (20 ms), so a machine stalled for a
// while never has JetStream redeliver a live consumer's message: the battery would count that
// second delivery as a repeat no kill explains. The window is small so that a kill finds a
// full window in flight.
type killTarget struct{ cfg Config }

func newKillTarget() killTarget {
	return killTarget{cfg: Config{
		URL:              natsURL(),
		Durable:          "millrace-killbattery",
		Window:           8,
		AckWait:          3 * time.Second,
		ProcessingBudget: time.Second,
		NackDelay:        100 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}}
}

func (k killTarget) NewAdapter(context.Context) (millrace.Adapter, error) { return New(k.cfg) }

func (killTarget) DeadLetterSubscriber(_ context.Context, a millrace.Adapter) (message.Subscriber, error) {
	return a.Subscriber(), nil
}

// Pending is what the durable consumer of topic holds: unacknowledged messages (those waiting
// for a delayed retry included) and messages not delivered yet.
func (k killTarget) Pending(ctx context.Context, am millrace.Adapter, topic string) (int, error) {
	a := killAdapterOf(am)
	c, err := a.js.Consumer(ctx, a.cfg.StreamName(topic), k.cfg.Durable)
	if err != nil {
		return 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.NumAckPending + int(info.NumPending), nil
}

func (k killTarget) Cleanup(ctx context.Context, a millrace.Adapter, topic string) error {
	nc, err := nats.Connect(k.cfg.URL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err1 := js.DeleteStream(ctx, StreamName(topic))
	err2 := js.DeleteStream(ctx, StreamName(a.DeadLetterTopic(topic)))
	if err1 != nil {
		return err1
	}
	return err2
}

// Bound is the package documentation's "# Crashes" section. Attempts only rise on a server
// that counts every delivery (countsEveryDelivery; TestServerCountsRedeliveryToDeadPuller shows
// the defect of older ones): on NATS 2.9 a killed consumer's pull requests make the server
// deliver a message again with NumDelivered 1.
func (k killTarget) Bound() killbattery.Bound {
	return killbattery.Bound{
		RepeatsPerKill:          2 * k.cfg.Window,
		ExtraDeadLettersPerKill: k.cfg.Window,
		CrashCostsAttempt:       true,
		AttemptsIncrease:        countsEveryDelivery(k.serverVersion()),
	}
}

// serverVersion is the version of the test server, "" when it cannot be reached (the battery
// then fails on its own).
func (k killTarget) serverVersion() string {
	nc, err := nats.Connect(k.cfg.URL, nats.MaxReconnects(0))
	if err != nil {
		return ""
	}
	defer nc.Close()
	return nc.ConnectedServerVersion()
}

// TestKillBattery: consumers SIGKILLed 20 times on the mixed workload lose nothing, leave
// nothing pending and stay within the bound the package documentation states.
func TestKillBattery(t *testing.T) {
	t.Parallel()
	testConn(t) // skip locally, fail in CI, when NATS is unreachable
	killbattery.Run(t, newKillTarget(), killbattery.Options{})
}

// TestKillBatteryFindsLoss is the battery's own test on this adapter: it must fail a consumer
// that acknowledges every message as it receives it, before the handler runs (at most once).
func TestKillBatteryFindsLoss(t *testing.T) {
	t.Parallel()
	testConn(t)
	rec := &testenv.ErrorRecorder{TB: t}
	killbattery.Run(rec, lossyTarget{newKillTarget()}, killbattery.Options{Messages: 40, Kills: 3, SettleTimeout: 5 * time.Second})
	if !rec.Reported("messages lost") {
		t.Fatalf("the battery did not report the lost messages; it reported: %q", rec.Errors())
	}
}

// lossyTarget is killTarget with an at-most-once consumer (lossyAdapter).
type lossyTarget struct{ killTarget }

func (l lossyTarget) NewAdapter(context.Context) (millrace.Adapter, error) {
	a, err := New(l.cfg)
	if err != nil {
		return nil, err
	}
	return lossyAdapter{a}, nil
}

// killAdapterOf returns the adapter under a, which may be wrapped in lossyAdapter.
func killAdapterOf(a millrace.Adapter) *Adapter {
	if w, ok := a.(lossyAdapter); ok {
		return w.Adapter
	}
	return a.(*Adapter)
}

// lossyAdapter is an Adapter whose subscriber acks each message before handing it on.
type lossyAdapter struct{ *Adapter }

func (a lossyAdapter) Subscriber() message.Subscriber { return lossySubscriber{a.Adapter.Subscriber()} }

type lossySubscriber struct{ message.Subscriber }

func (s lossySubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			if d := deliveryFrom(msg); d != nil && d.settle() {
				_ = d.msg.DoubleAck(context.Background())
			}
			out <- msg
		}
	}()
	return out, nil
}
