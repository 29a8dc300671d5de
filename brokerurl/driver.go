package brokerurl

import (
	"context"
	"log/slog"
	"net/url"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// Driver opens the brokers of one adapter package from their URLs. Each adapter package
// registers one with the default Mux in its init function.
type Driver interface {
	// Schemes lists the lower-case URL schemes the driver opens, e.g. "kafka".
	Schemes() []string
	// Open connects to the broker u names and checks that it answers. It fails with an error
	// wrapping ErrUnknownParameter, naming them, on query parameters it does not know.
	Open(ctx context.Context, u *url.URL, opts Options) (Broker, error)
	// OpenAdapter opens only the adapter u names: what a consumer or publisher needs, with no
	// connection for operations. Closing the adapter releases everything it opened.
	OpenAdapter(ctx context.Context, u *url.URL, opts Options) (millrace.Adapter, error)
}

// Options are the settings of an opened broker that a URL does not carry.
type Options struct {
	// Logger receives the adapter's logs. Default: a logger that discards everything. A broker
	// client that logs through a process-wide logger (go-redis, amqp091) is not touched: a
	// program that owns its process silences those with Mux.SilenceClientLogs.
	Logger *slog.Logger
	// NoConsume opens the broker to publish and to read dead letters only, as the CLI does: a
	// URL without a consumer group (Redis Streams, Kafka) is then accepted. Default false:
	// a driver whose adapter consumes in a group refuses a URL without one.
	NoConsume bool
}

// Broker is one opened broker connection: the adapter, and what operating its dead letters
// needs beyond the adapter.
type Broker interface {
	// Adapter is the millrace adapter on this connection. Closing the Broker closes it.
	Adapter() millrace.Adapter
	// TopicExists reports whether topic exists and can receive a publish that a consumer will
	// read (a Redis stream, a RabbitMQ work queue, a Kafka topic, an SQS queue).
	TopicExists(ctx context.Context, topic string) (bool, error)
	// DeadLetters returns the dead-letter destination named dlq as a store. When the
	// destination does not exist the error wraps deadletter.ErrDestinationNotFound.
	DeadLetters(ctx context.Context, dlq string) (deadletter.Store, error)
	// DeadLetterDestinations lists the dead-letter destinations the broker holds, sorted by
	// name.
	DeadLetterDestinations(ctx context.Context) ([]Destination, error)
	// PrepareReplay adjusts a message about to be re-published from rec for this broker (for
	// RabbitMQ, the original routing key); most brokers need nothing.
	PrepareReplay(rec deadletter.Record, msg *message.Message)
	// Close releases the connection and the adapter.
	Close() error
}

// ReplayChecker is implemented by a Broker that can tell, before publishing, that it will never
// take a replayed message as it is: for SQS, a message to a FIFO queue without a valid message
// group (a dead letter of a standard queue records none), a payload or metadata that is not
// UTF-8 text, or a message larger than the queue takes. `millrace dlq replay` calls CheckReplay
// with msg as PrepareReplay left it, built from rec: an error wrapping
// deadletter.ErrNotReplayable keeps that dead letter in the store, and the replay goes on with
// the next one (a failed publish stops it); any other error (the broker could not be asked)
// stops the replay. With --dry-run a refusal is reported as "would refuse". CheckReplay
// publishes nothing and changes nothing; as --dry-run calls PrepareReplay before it, the
// PrepareReplay of a Broker that has CheckReplay changes nothing but the message. A Broker
// without it is not asked.
type ReplayChecker interface {
	CheckReplay(ctx context.Context, topic string, rec deadletter.Record, msg *message.Message) error
}

// Destination is one dead-letter destination a broker holds.
type Destination struct {
	// Name is the destination's name, as DeadLetters takes it.
	Name string
	// Topic is the work topic whose dead letters it holds, as the adapter names them ("" when
	// the name does not follow the adapter's naming).
	Topic string
	// Depth is how many dead letters it holds, as the broker counts them.
	Depth int64
	// Approximate is true when the broker's count is an estimate (SQS).
	Approximate bool
}

// ClientLogSilencer is a Driver whose broker client logs through a process-wide logger of its
// own (go-redis prints dial failures, amqp091 prints connection errors). Only a program that
// owns its process, such as the CLI, should silence it: a library must not.
type ClientLogSilencer interface {
	// SilenceClientLogs discards the broker client's process-wide log output.
	SilenceClientLogs()
}

// LoggerOrDiscard returns Logger, or a logger that discards everything when it is nil.
func (o Options) LoggerOrDiscard() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}
