package amqp_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/conformance/cutbattery"
	"github.com/millrace/millrace/internal/testenv"
)

// cutTarget puts both of the adapter's connections (consuming and publishing) behind the
// battery's proxy; the workload is published, and dead letters read, by a second adapter on a
// direct connection.
type cutTarget struct {
	qt amqp.QueueType
}

func (c cutTarget) Name() string { return "amqp/" + string(c.qt) }

func (cutTarget) Upstreams(t testing.TB) []string {
	u, err := url.Parse(brokerURL())
	if err != nil {
		t.Fatalf("%s=%q: %v", envURL, brokerURL(), err)
	}
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", u.Host, envURL, err)
	}
	_ = conn.Close()
	return []string{u.Host}
}

func (c cutTarget) Connect(ctx context.Context, t testing.TB, topic string, proxied []string) (cutbattery.System, error) {
	u, err := url.Parse(brokerURL())
	if err != nil {
		return cutbattery.System{}, err
	}
	u.Host = proxied[0]
	q := u.Query()
	q.Set("heartbeat", strconv.Itoa(int(cutHeartbeat/time.Second)))
	u.RawQuery = q.Encode()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := amqp.New(ctx, amqp.Config{URL: u.String(), QueueType: c.qt, Window: cutWindow, Prefetch: cutPrefetch, Logger: logger})
	if err != nil {
		return cutbattery.System{}, err
	}
	tools := newAdapter(ctx, t, amqp.Config{QueueType: c.qt, Logger: logger})
	t.Cleanup(func() {
		_ = a.Close()
		deleteAll(t, a.Declared())
	})
	return cutbattery.System{
		Adapter:     a,
		Publisher:   tools.Publisher(),
		DeadLetters: tools.Subscriber(),
		Pending: func(_ context.Context, topic string) (int, error) {
			return queuesDepth(append([]string{topic}, a.RetryQueues(topic)...))
		},
		Bound: amqpCutBound(cutHeartbeat),
	}, nil
}

// cutHeartbeat is the heartbeat the battery's URL asks for (?heartbeat=2): a silent connection
// is noticed after 3 s instead of 15 s with the default 10 s, which keeps the run short; the
// bound scales with it.
const cutHeartbeat = 2 * time.Second

// The cut battery's Config.Window and Config.Prefetch: smaller than the defaults, so that the
// bound, which grows with Prefetch, is tight enough for the battery to catch a breach.
const cutWindow, cutPrefetch = 8, 16

// amqpCutBound is the bound doc.go states under "Connection loss", for heartbeat, the default
// ReconnectDelay (1 s) and cutPrefetch.
func amqpCutBound(heartbeat time.Duration) cutbattery.Bound {
	notice := 3 * heartbeat / 2 // amqp091's read deadline: three of its heartbeat intervals (heartbeat/2)
	const dialTimeout, reconnectDelay, prefetch = 10 * time.Second, time.Second, cutPrefetch
	return cutbattery.Bound{
		// 2 s: the backlog that built up meanwhile is handled before the probe.
		Resume: max(notice, dialTimeout) + reconnectDelay + 2*time.Second,
		// The client notices, and RabbitMQ notices the connection it abandoned (two heartbeats).
		Settle:             notice + 2*heartbeat + 2*time.Second,
		DuplicatesPerCut:   prefetch,
		AttemptsLostPerCut: prefetch,
	}
}

// queuesDepth sums the ready messages of queues, on a connection of its own.
func queuesDepth(queues []string) (int, error) {
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	total := 0
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			return 0, err
		}
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		_ = ch.Close()
		if err != nil {
			return 0, fmt.Errorf("inspect queue %s: %w", q, err)
		}
		total += st.Messages
	}
	return total, nil
}

// TestCutBattery cuts both of the adapter's connections mid-stream (resets and black holes, on
// dead-letter publishes, retry rejections and acks), on classic and quorum queues, and checks
// it reconnects by itself, loses nothing and duplicates within its documented bound.
func TestCutBattery(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		cutbattery.Run(t, cutTarget{qt: qt}, cutbattery.Options{})
	})
}
