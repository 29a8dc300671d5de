package millrace

import "context"

// Unknown is a Backlog count the broker cannot report.
const Unknown int64 = -1

// Backlog is what a broker reports of one topic's consumption at one moment, for gauges and
// alerts (consumer lag together with dead-letter growth, field report 3). A count the broker
// cannot give is Unknown.
type Backlog struct {
	// Waiting is what no consumer has been given yet: Redis Streams group lag, RabbitMQ ready
	// messages, NATS pending, SQS visible messages; Kafka's lag summed over the source topic's
	// partitions, in offsets (which includes what members fetched and hold unsettled).
	Waiting int64
	// InFlight is what consumers hold unsettled: Redis pending entries less the scheduled
	// retries (which stay pending), NATS ack pending (its NakWithDelay retries included), SQS
	// not-visible messages (its scheduled retries included), RabbitMQ unacked messages (read
	// from the management API when amqp.Config.ManagementURL is set, else Unknown); Unknown on
	// Kafka (part of Waiting).
	InFlight int64
	// RetriesWaiting is retries scheduled and not yet due or delivered: Redis scheduled
	// retries, RabbitMQ delay-tier queues, Kafka retry topics' lag; Unknown where they are
	// part of InFlight (NATS, SQS). Each adapter's Backlog documents its own fields.
	RetriesWaiting int64
	// DeadLetters is the depth of the topic's dead-letter destination.
	DeadLetters int64
	// Partitions is the lag per partition where the broker has partitions (Kafka: the source
	// topic's and its retry topics'), else nil.
	Partitions []PartitionBacklog
}

// PartitionBacklog is one partition's lag.
type PartitionBacklog struct {
	// Topic is the partition's topic (the source topic or a retry tier's).
	Topic string
	// Partition is the partition number.
	Partition int32
	// Lag is the high watermark minus the group's committed offset (offset lag, as Kafka's own
	// tools report it): an upper bound of the records, since a transaction's marker and an
	// aborted record take an offset too (see the Kafka adapter's Backlog).
	Lag int64
}

// BacklogReporter is an Adapter that can report a topic's Backlog: the gauges of
// telemetry.Telemetry.ObserveBacklog read it on each collection. Report reads the broker (one or a
// few round trips) and must return within ctx.
type BacklogReporter interface {
	Backlog(ctx context.Context, topic string) (Backlog, error)
}

// ConsumerGroupNamer is an Adapter that names the consumer group its subscriptions to a topic
// join (a Kafka consumer group, a Redis Streams group, a NATS durable): the router labels the
// topic's telemetry with it (messaging.consumer.group.name). An adapter whose broker has no
// such name (RabbitMQ and SQS, where the queue is the destination) does not implement it, or
// returns "".
type ConsumerGroupNamer interface {
	ConsumerGroup(topic string) string
}
