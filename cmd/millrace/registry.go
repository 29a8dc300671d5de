package main

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

// Broker is one broker connection opened from a --broker URL: where replays are published, and
// (where the adapter supports it) a dead-letter destination readable as a deadletter.Store.
type Broker interface {
	// Publisher publishes replayed messages through the broker's millrace adapter.
	Publisher() message.Publisher
	// TopicExists reports whether topic exists and can receive a replay.
	TopicExists(ctx context.Context, topic string) (bool, error)
	// DeadLetterTopic names the dead-letter destination of topic, as the adapter does.
	DeadLetterTopic(topic string) string
	// DeadLetters returns the dead-letter destination named dlq as a store, or an error
	// wrapping errNoDeadLetterStore.
	DeadLetters(ctx context.Context, dlq string) (deadletter.Store, error)
	// Close releases the connection.
	Close() error
}

// BrokerOpener connects to the broker at u; it fails when the broker cannot be reached.
type BrokerOpener func(ctx context.Context, u *url.URL) (Broker, error)

// replayPreparer is a Broker that adjusts a replayed message for its broker (RabbitMQ restores
// the original routing key).
type replayPreparer interface {
	prepareReplay(rec deadletter.Record, msg *message.Message)
}

// errNoDeadLetterStore is wrapped by Broker.DeadLetters when the broker's destination cannot be
// read as a store by this build.
var errNoDeadLetterStore = errors.New("this broker's dead-letter destination cannot be read by millrace yet")

// errUsage marks bad command-line input: the exit status is 2 instead of 1.
var errUsage = errors.New("usage")

// defaultBrokers is the registry of URL schemes this build knows: one opener per adapter that
// has landed, each in a broker_<name>.go file of this command.
func defaultBrokers() map[string]BrokerOpener {
	return map[string]BrokerOpener{
		"redis":  openRedis,
		"rediss": openRedis,
		"amqp":   openAMQP,
		"amqps":  openAMQP,
		// Kafka and SQS take the URL forms of examples/kafka-to-sqs: one syntax everywhere.
		"kafka":     openKafka,
		"sqs+http":  openSQS,
		"sqs+https": openSQS,
	}
}

// schemes lists the known schemes, sorted, for error messages.
func schemes(m map[string]BrokerOpener) string {
	var s []string
	for k := range m {
		s = append(s, k+"://")
	}
	slices.Sort(s)
	if len(s) == 0 {
		return "none in this build"
	}
	return strings.Join(s, ", ")
}
