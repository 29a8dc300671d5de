package nats

// ConsumerGroup implements millrace.ConsumerGroupNamer: every subscription of a topic joins
// the durable pull consumer Config.Durable of the topic's stream, so that is the topic's group
// (messaging.consumer.group.name on the router's telemetry).
func (a *Adapter) ConsumerGroup(string) string { return a.cfg.Durable }
