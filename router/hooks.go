package router

import "github.com/millrace/millrace/middleware"

// RetryEvent is what Config.OnRetry is told about a scheduled retry: the attempt that failed,
// the delay asked of the adapter, the error and the failure time.
type RetryEvent = middleware.RetryEvent

// DeadLetterEvent is what Config.OnDeadLetter is told about a written dead letter: the record
// as written (reason, attempts, last error, ...) and the error itself.
type DeadLetterEvent = middleware.DeadLetterEvent

// OnRetryFunc is the type of Config.OnRetry.
type OnRetryFunc = middleware.OnRetryFunc

// OnDeadLetterFunc is the type of Config.OnDeadLetter.
type OnDeadLetterFunc = middleware.OnDeadLetterFunc
