// Package middleware holds millrace's reliability middleware, one per file, each a plain
// Watermill message.HandlerMiddleware so it also works in a hand-built router.
//
// The router package installs them in this order, outermost first:
//
//	Poison     dead-letter exhausted, malformed (and optionally discarded) messages, then ack;
//	           a failed dead-letter write nacks
//	Attempt    decode the delivery's Attempt from native state; refuse undecodable or over-limit
//	           deliveries without calling the handler (Poison, outside it, dead-letters them)
//	Retry      call the rest again at once for RetryPolicy.Immediate attempts, within one
//	           deadline; then schedule a delayed redelivery through the adapter, never by
//	           sleeping; a failed schedule nacks
//	Breaker    (when configured) after consecutive Retry outcomes, hold arriving messages
//	           unsettled without calling the handler until a probe succeeds
//	Classify   give every error an Outcome
//	Budget     bound the handler's run time with a context deadline
//	Recover    turn a panic into a Retry
//
// The rule that holds in every path: the original message is acknowledged only after its retry
// or its dead letter is safely written.
//
// Hooks: RetryConfig.OnRetry and PoisonConfig.OnDeadLetter are called once per retry and once
// per dead letter, for alerting and audit, only after the adapter confirmed the write (a failed
// write nacks and calls no hook). They run synchronously on the message's goroutine before its
// ack, so they must be quick; a panic in one is recovered and logged, and changes nothing for
// the message. Nil hooks add nothing to a message that succeeds.
//
// Outage breaker: Breaker keeps a dependency outage from using up every message's attempts. A
// message waiting in an open breaker is settled by neither ack nor nack, so the adapter's bound
// on unsettled messages is its pause; what that bound is on each broker, and what a long wait
// costs there, is in Breaker's documentation.
package middleware
