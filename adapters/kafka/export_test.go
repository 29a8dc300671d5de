package kafka

import "github.com/IBM/sarama"

// Sessions returns how many consumer-group sessions this adapter's subscriptions started: one
// per subscription, plus one per rebalance.
func (a *Adapter) Sessions() int64 { return a.sessions.Load() }

// SaramaConfig returns the client configuration the adapter derives from cfg.
func SaramaConfig(cfg Config) *sarama.Config { return cfg.withDefaults().saramaConfig() }

// ClientConfig returns the sarama configuration the adapter built and its clients use.
func (a *Adapter) ClientConfig() *sarama.Config { return a.sc }

// PendingFactor times MaxInFlight is how many records of a partition may wait unmarked.
const PendingFactor = pendingFactor

// Group returns the adapter's consumer group.
func (a *Adapter) Group() string { return a.cfg.ConsumerGroup }

// RetryTopicMaxBytes is the max.message.bytes Provision gives the retry and dead-letter topics
// of a source topic whose max.message.bytes is s, with the adapter's producer settings.
func (a *Adapter) RetryTopicMaxBytes(s int64) (int64, error) {
	z, err := a.sizeFor("t", s)
	return z.topicLimit, err
}

// TransactionalID is the transactional id of a claimed partition's producer.
func TransactionalID(prefix, group, topic string, partition int32) string {
	return transactionalID(prefix, group, topic, partition)
}

// RetryQueueStats returns the most records one retry partition's queue of this adapter's
// subscriptions held at once, and how many times such a queue paused its partition.
func (a *Adapter) RetryQueueStats() (maxQueued, pauses int64) {
	return a.retryQueues.maxQueued.Load(), a.retryQueues.pauses.Load()
}

// RetryQueueHigh is how many records a retry partition's queue takes before pausing the
// partition, at least.
const RetryQueueHigh = retryQueueHigh
