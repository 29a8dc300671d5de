package kafka

import "github.com/millrace/millrace"

var _ millrace.ConsumerGroupNamer = (*Adapter)(nil)

// ConsumerGroup returns Config.ConsumerGroup: every subscription of this adapter, to any
// topic, joins that one Kafka consumer group (its retry topics' partitions included).
func (a *Adapter) ConsumerGroup(string) string { return a.cfg.ConsumerGroup }
