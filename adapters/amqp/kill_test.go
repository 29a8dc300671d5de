package amqp_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/conformance/killbattery"
	"github.com/millrace/millrace/internal/testenv"
)

// killTarget runs the kill battery on the test broker with one queue type. RabbitMQ returns a
// killed consumer's unacknowledged messages as soon as its connection drops, so no timing needs
// shortening but the requeue pause. The window and prefetch are smaller than the defaults, so
// that the bound, which grows with them, is tight enough for the battery to catch a breach.
type killTarget struct{ queueType amqp.QueueType }

func (k killTarget) NewAdapter(ctx context.Context) (millrace.Adapter, error) {
	return amqp.New(ctx, amqp.Config{
		URL:          brokerURL(),
		QueueType:    k.queueType,
		RequeueDelay: 50 * time.Millisecond,
		Window:       killWindow,
		Prefetch:     killPrefetch,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
}

func (killTarget) DeadLetterSubscriber(_ context.Context, a millrace.Adapter) (message.Subscriber, error) {
	return a.Subscriber(), nil
}

// Pending sums the messages of every queue the parent's adapter declared for the topic but the
// DLQ: the work queue and its retry tiers. A passive declare counts ready messages only, which
// is all of them once the last consumer has gone.
func (killTarget) Pending(_ context.Context, a millrace.Adapter, topic string) (int, error) {
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	n := 0
	for _, o := range a.(*amqp.Adapter).Declared() {
		if o[0] != "queue" || o[1] == a.DeadLetterTopic(topic) {
			continue
		}
		q, err := ch.QueueDeclarePassive(o[1], true, false, false, false, nil)
		if err != nil {
			return 0, err
		}
		n += q.Messages
	}
	return n, nil
}

// Cleanup deletes every queue and exchange the parent's adapter declared.
func (killTarget) Cleanup(_ context.Context, a millrace.Adapter, _ string) error {
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		return err
	}
	defer conn.Close()
	var errs []error
	for _, o := range a.(*amqp.Adapter).Declared() {
		ch, err := conn.Channel()
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if o[0] == "queue" {
			_, err = ch.QueueDelete(o[1], false, false, false)
		} else {
			err = ch.ExchangeDelete(o[1], false, false)
		}
		errs = append(errs, err)
		_ = ch.Close()
	}
	return errors.Join(errs...)
}

// The kill battery's Config.Window and Config.Prefetch.
const killWindow, killPrefetch = 8, 16

// Bound is the package documentation's "# Crashes" section: the broker holds at most Prefetch
// deliveries of a subscription unsettled, the Window in flight and the acks waiting to be
// coalesced or caught on their way by the kill, so at most Prefetch calls are made again and
// at most Prefetch dead letters lose the ack of their original.
func (killTarget) Bound() killbattery.Bound {
	return killbattery.Bound{
		RepeatsPerKill:          killPrefetch,
		ExtraDeadLettersPerKill: killPrefetch,
		CrashCostsAttempt:       true,
		AttemptsIncrease:        false,
	}
}

// TestKillBattery: consumers SIGKILLed 20 times on the mixed workload lose nothing, leave
// nothing pending and stay within the bound the package documentation states, on classic and
// on quorum queues.
func TestKillBattery(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		conn, err := amqp091.Dial(brokerURL())
		if err != nil {
			testenv.Unreachable(t, "RabbitMQ", brokerURL(), envURL, err)
		}
		_ = conn.Close()
		killbattery.Run(t, killTarget{qt}, killbattery.Options{})
	})
}
