package nats

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/conformance/cutbattery"
)

// cutAckWait is the battery's AckWait: a delivery whose ack a cut lost comes back after it.
const cutAckWait = 5 * time.Second

// cutTarget puts the adapter's NATS connection behind the battery's proxy; the workload is
// published, and dead letters read, by a second adapter on a direct connection.
type cutTarget struct {
	ackWait time.Duration // default cutAckWait
}

func (cutTarget) Name() string { return "nats" }

func (cutTarget) Upstreams(t testing.TB) []string {
	return []string{testConn(t).ConnectedAddr()}
}

func (c cutTarget) Connect(_ context.Context, t testing.TB, topic string, proxied []string) (cutbattery.System, error) {
	testConn(t)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ackWait := cutAckWait
	if c.ackWait > 0 {
		ackWait = c.ackWait
	}
	cfg := Config{URL: "nats://" + proxied[0], Durable: "cutbattery", AckWait: ackWait, ProcessingBudget: 2 * time.Second,
		NackDelay: 200 * time.Millisecond, Logger: logger}
	a, err := New(cfg)
	if err != nil {
		return cutbattery.System{}, err
	}
	toolsCfg := cfg
	toolsCfg.URL, toolsCfg.Durable = natsURL(), "cutbattery-tools"
	tools, err := New(toolsCfg)
	if err != nil {
		return cutbattery.System{}, err
	}
	t.Cleanup(func() {
		_ = tools.js.DeleteStream(context.Background(), StreamName(topic))
		_ = tools.js.DeleteStream(context.Background(), StreamName(a.DeadLetterTopic(topic)))
		_ = tools.Close()
	})
	return cutbattery.System{
		Adapter:     a,
		Publisher:   tools.Publisher(),
		DeadLetters: tools.Subscriber(),
		Pending: func(ctx context.Context, topic string) (int, error) {
			return killTarget{cfg: cfg}.Pending(ctx, tools, topic)
		},
		Bound: natsCutBound(a.Config()),
	}, nil
}

// natsCutBound is the bound doc.go states under "Connection loss" for cfg.
func natsCutBound(cfg Config) cutbattery.Bound {
	detect := 3*cfg.PingInterval + ReconnectWait
	return cutbattery.Bound{
		Resume:             detect + 2*time.Second,
		Settle:             cfg.AckWait + detect,
		DuplicatesPerCut:   2 * cfg.Window,
		AttemptsLostPerCut: 2 * cfg.Window,
	}
}

// TestCutBattery cuts the adapter's NATS connection mid-stream (resets and black holes, on
// dead-letter writes, retry writes and acks) and checks it resumes by itself, loses nothing
// and duplicates within its documented bound.
func TestCutBattery(t *testing.T) {
	cutbattery.Run(t, cutTarget{}, cutbattery.Options{})
}

// TestCutBatteryCatchesAckWithoutDeadLetter: the battery fails an adapter that acks a message
// whose dead letter was not written. The cut is a black hole (a reset often leaves nats.go
// time to resend the write after reconnecting, so it does not fail), and AckWait is long, so
// that the write fails (at its deadline, 10 s after the hand-out) and the wrong ack reaches
// the server before JetStream would redeliver.
func TestCutBatteryCatchesAckWithoutDeadLetter(t *testing.T) {
	target := &cutbattery.AckAnyway{Target: cutTarget{ackWait: 20 * time.Second}, Settle: 2 * time.Second}
	res, problems := cutbattery.Measure(t, target, cutbattery.Options{Cuts: 1, Kinds: []cutbattery.Kind{cutbattery.BlackHole}, Gap: time.Second, Timeout: 40 * time.Second})
	t.Log(res.CountsLine(res.Bound))
	if target.Swallowed() == 0 {
		t.Fatalf("no dead-letter write failed in the cut (landed on %s): the test proves nothing", res.Cuts[0].Landed)
	}
	if res.Lost == 0 || !strings.Contains(strings.Join(problems, "\n"), "messages lost") {
		t.Fatalf("%d dead-letter writes failed and were acked anyway, but the battery reports lost=%d, problems %q", target.Swallowed(), res.Lost, problems)
	}
}
