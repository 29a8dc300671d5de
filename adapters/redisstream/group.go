package redisstream

import "github.com/millrace/millrace"

var _ millrace.ConsumerGroupNamer = (*Adapter)(nil)

// ConsumerGroup implements millrace.ConsumerGroupNamer: every subscription of the adapter, to
// any stream (its Subscriber's and its DeadLetterSubscriber's alike), joins the Redis Streams
// consumer group Config.Group, so that is the topic's group (messaging.consumer.group.name on
// the router's telemetry).
func (a *Adapter) ConsumerGroup(string) string { return a.cfg.Group }
