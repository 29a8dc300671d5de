// Package millrace is the broker-neutral vocabulary of millrace: the Outcome a handler reaches,
// the Attempt a delivery represents, the RetryPolicy that bounds retries, the Adapter contract
// every broker package implements, and the sentinel errors shared by all of them.
//
// The package imports no broker client. Broker adapters (package adapters/...) depend on it,
// never the other way round.
//
// A handler signals its outcome through the error it returns:
//
//	nil                        -> Success: the message is acknowledged.
//	millrace.Discard(err)      -> Discard: never worth retrying; acknowledged (optionally dead-lettered).
//	millrace.Retry(err)        -> Retry: tried again at once up to RetryPolicy.Immediate times,
//	                              then redelivered after the policy delay, up to MaxAttempts.
//	millrace.RetryAfter(err,d) -> Retry with an explicit delay.
//	millrace.Malformed(err)    -> the payload cannot be decoded: dead-lettered at once, bytes intact.
//	any other error            -> classified by the configured Classifier (default: Retry).
//	panic                      -> Retry, with the panic value in the error.
package millrace
