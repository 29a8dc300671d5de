package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/amqpstore"
)

// amqpBroker is RabbitMQ through adapters/amqp with its default topology: a topic's exchange
// and work queue are both named like the topic. Replays are confirmed publishes to that
// exchange with the dead letter's original routing key.
type amqpBroker struct {
	a    *amqp.Adapter
	conn *amqp091.Connection // for passive queue checks, which close their channel on a miss
}

// openAMQP connects to amqp://user:password@host:port/vhost (amqps:// for TLS).
func openAMQP(ctx context.Context, u *url.URL) (Broker, error) {
	a, err := amqp.New(ctx, amqp.Config{URL: u.String()})
	if err != nil {
		return nil, err
	}
	conn, err := amqp091.DialConfig(u.String(), amqp091.Config{Dial: amqp091.DefaultDial(10 * time.Second)})
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	return &amqpBroker{a: a, conn: conn}, nil
}

func (b *amqpBroker) Publisher() message.Publisher { return b.a.Publisher() }

// TopicExists reports whether the topic's work queue exists (a passive declare): a publish to a
// topic without its queue would be unroutable.
func (b *amqpBroker) TopicExists(_ context.Context, topic string) (bool, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return false, err
	}
	_, err = ch.QueueDeclarePassive(topic, true, false, false, false, nil)
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound {
		return false, nil // the broker closed the channel
	}
	_ = ch.Close()
	return err == nil, err
}

func (b *amqpBroker) DeadLetterTopic(topic string) string { return b.a.DeadLetterTopic(topic) }

// DeadLetters reads the DLQ through package amqpstore: the command takes the whole queue
// unacknowledged, acks what it deletes and requeues the rest when it ends.
func (b *amqpBroker) DeadLetters(_ context.Context, dlq string) (deadletter.Store, error) {
	return amqpstore.New(b.conn, dlq, amqpstore.Config{Marshaler: b.a.Marshaler()})
}

// prepareReplay restores the original routing key: the dead letter may have come back through
// a retry queue with another key (field report 2, trap 1).
func (b *amqpBroker) prepareReplay(rec deadletter.Record, msg *message.Message) {
	if rec.OriginalKey != "" {
		msg.Metadata.Set(amqp.MetadataRoutingKey, rec.OriginalKey)
	}
}

func (b *amqpBroker) Close() error {
	_ = b.conn.Close()
	return b.a.Close()
}
