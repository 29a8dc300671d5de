// Package amqp is the millrace adapter for RabbitMQ (AMQP 0-9-1, tested on RabbitMQ 3.10).
//
// # Topology
//
// A millrace topic is a work queue. For topic T, with Config.Topics[T] = {Exchange: E,
// BindingKeys: K} (defaults: E = T, K = ["#"]), the adapter declares, all durable:
//
//	E               topic exchange; T is bound to it once per key in K (e.g. "hub.#")
//	T               work queue; x-dead-letter-exchange = T.dlx, x-dead-letter-routing-key = "retry"
//	                (quorum: x-delivery-limit = Config.DeliveryLimit, at-least-once dead-lettering)
//	T.dlx           direct exchange for retries and dead letters
//	T.retry         retry queue of the policy's first delay d1: x-message-ttl = d1, bound to T.dlx
//	                with "retry"; expired messages go through the default exchange back to T only
//	T.retry.<ms>ms  one more retry queue per other distinct delay, bound with "retry.<ms>ms"
//	T.dlq           dead-letter queue, bound to T.dlx with "dlq"; it has no dead-letter exchange,
//	                so nothing leaves it by itself
//
// Subscribe declares everything but the retry queues, which depend on the policy; Provision
// (called by router.Run) declares them. Retries come back through the default exchange rather
// than E so that other queues bound to E (say with "#") never receive a copy. Publish(T, msgs)
// publishes to E with the routing key in metadata MetadataRoutingKey (default T), as mandatory,
// and waits for publisher confirms: a message no queue is bound for (published before the work
// queue was declared, or with a key no binding matches) fails with ErrUnroutable rather than
// being confirmed and dropped.
//
// # Retries
//
// A Retry below MaxAttempts whose delay is d1 (every retry of a Fixed backoff, as in the field
// report's single 3-second tier) is rejected without requeue: RabbitMQ dead-letters the message
// into T.retry, records it in x-death, and the TTL brings it back. A retry with another delay
// cannot be routed by the broker (x-dead-letter-routing-key is one per queue), so the adapter
// publishes a copy to that tier with confirms and acks the original; the copy carries the next
// attempt number and the original routing key in millrace headers, since x-death starts again on
// a new copy (and RabbitMQ 4.x ignores a client-set x-death). RetryAfter delays round up to the
// next tier (beyond the longest: the longest).
//
// At the cap (and for Malformed, and Discard when configured) the message is published to T.dlq
// as mandatory with publisher confirms, then acked. If the broker nacks it or returns it as
// unroutable, the original is not acked: it is requeued after Config.RequeueDelay. Any nack other
// than a scheduled retry requeues.
//
// # Classic queues lose retries when dead-lettering fails: prefer quorum queues
//
// The first-delay retry path is at-most-once on classic queues. basic.reject removes the message
// from T before RabbitMQ has put it in T.retry, and classic queues dead-letter at-most-once: if
// T.retry is missing (deleted, not yet provisioned by this deployment) or refuses the message,
// RabbitMQ drops it silently, and every message rejected for a retry meanwhile is lost. Quorum
// queues declare x-dead-letter-strategy = at-least-once and keep the message until T.retry has
// confirmed it. Retries to the other tiers and dead letters are confirmed copies on both queue
// types and are not affected. Use QueueType Quorum wherever a lost retry matters; on classic
// queues, never delete T.retry while consumers run.
//
// # Attempt
//
// Attempt.Number = base + rejections + returns, where base is the millrace-attempt header of a
// republished copy (else 1), rejections is the sum of the x-death counts for T with reason
// "rejected" or "delivery_limit", and returns is the quorum queue's x-delivery-count (a consumer
// crash or requeue; such returns are counted until the next trip through a retry queue, which
// starts a new queue entry). Classic queues keep no delivery counter: there returns is 1 when
// RabbitMQ flags the delivery redelivered (metadata MetadataRedelivered is "true"), else 0. That
// is conservative on purpose: after a failed dead-letter or retry write the requeued message
// arrives past the attempt it failed on, so the router retries the write without calling the
// handler again (instead of calling it every RequeueDelay while the DLQ is unavailable); in
// exchange a consumer crash also costs the messages it held an attempt, as on quorum queues and
// SQS, and a message a classic queue redelivers many times still counts one. On quorum queues the router
// refuses a policy with more attempts than the delivery limit, so millrace gives up before the
// broker does. Attempt.OriginalKey is the original routing key: the millrace-original-key header
// of a republished copy, else the first routing key of the oldest x-death entry, else the
// delivery's. Attempt.FirstAttemptAt comes from the oldest x-death entry of T (whole seconds).
// The previous error is not carried (CarriesLastError is false): a rejected message cannot be
// given new headers.
//
// # Metadata
//
// Every header becomes metadata; non-string values (x-death, integers, tables, arrays,
// timestamps, bytes) take a stable text form (numbers in decimal, timestamps RFC 3339, bytes
// base64, tables and arrays JSON), so no header ever stops consumption. MetadataRoutingKey holds
// the ORIGINAL routing key on every attempt; MetadataDeliveryRoutingKey the delivery's own.
// Config.CheckDelivery can refuse a body (e.g. invalid JSON): the delivery is then dead-lettered
// as Malformed, bytes intact, without calling the handler.
//
// # Shutdown
//
// Watermill closes the subscriber as soon as the router starts closing. The subscription then
// takes no new delivery but waits (at most Config.DrainTimeout) for the router to ack or nack the
// message in flight, whose context is not cancelled, so a handler finishing within the router's
// CloseTimeout is acked rather than redelivered. Closing the Adapter requeues it at once.
//
// The package's own subscriber replaces watermill-amqp's, whose Nack has one static requeue
// flag; the Marshaler implements watermill-amqp's Marshaler interface and TopologyBuilder
// returns a watermill-amqp TopologyBuilder, for services that publish with watermill-amqp.
//
// Tests use the broker at MILLRACE_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/).
package amqp
