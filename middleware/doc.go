// Package middleware holds millrace's reliability middleware, one per file, each a plain
// Watermill message.HandlerMiddleware so it also works in a hand-built router.
//
// The router package installs them in this order, outermost first:
//
//	Poison     dead-letter exhausted, malformed (and optionally discarded) messages, then ack;
//	           a failed dead-letter write nacks
//	Attempt    decode the delivery's Attempt from native state; refuse undecodable or over-limit
//	           deliveries without calling the handler (Poison, outside it, dead-letters them)
//	Retry      schedule a delayed redelivery through the adapter, never by sleeping;
//	           a failed schedule nacks
//	Classify   give every error an Outcome
//	Budget     bound the handler's run time with a context deadline
//	Recover    turn a panic into a Retry
//
// The rule that holds in every path: the original message is acknowledged only after its retry
// or its dead letter is safely written.
package middleware
