// Package memory is millrace's in-process broker: the embedded default for unit tests, examples
// and the quick start. It needs no services.
//
// Semantics: each topic is one queue shared by every subscription to it (competing consumers,
// like a Redis consumer group or a RabbitMQ queue); a subscription holds one message at a time
// until it is acked or nacked. A nack puts the message back at the tail of its queue and counts
// one more native delivery. A retry is a copy published to the same topic when its delay has
// passed (a timer, so the queue is never blocked), with the payload and metadata unchanged; its
// attempt history is kept by the adapter beside the copy, never in its metadata, so
// millrace-* metadata a producer sets is content, never retry state (and is never replaced).
// Dead letters go to the topic "<topic>.dlq" (Config.DeadLetterSuffix). Nothing survives Close
// or the end of the process: pending retries are dropped.
package memory
