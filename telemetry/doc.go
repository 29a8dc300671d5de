// Package telemetry records millrace's OpenTelemetry metrics and spans: every outcome, retry,
// dead letter and failure of every handler, on the OpenTelemetry API only. Give a Telemetry
// made with the application's MeterProvider and TracerProvider to router.Config.Telemetry; the
// zero Config uses no-op providers (nothing recorded, no header written).
//
//	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp, TracerProvider: tp})
//	r, err := router.New(router.Config{Adapter: a, Policy: p, Telemetry: tel})
//
// # Metrics
//
// Every instrument carries messaging.system (the broker), messaging.destination.name (the
// topic) and millrace.handler:
//
//	millrace.deliveries            counter   handler calls by millrace.outcome (SUCCESS, DISCARD,
//	                                         RETRY, MALFORMED) and millrace.reason (handler, panic,
//	                                         timeout), and deliveries refused before the handler
//	                                         (MALFORMED/undecodable, RETRY/over_limit)
//	millrace.retries               counter   retries the broker confirmed
//	millrace.retry.failures        counter   retry writes that failed (the original was not acked)
//	millrace.dead_letters          counter   dead letters written, by millrace.reason (exhausted,
//	                                         malformed, discarded)
//	millrace.dead_letter.failures  counter   dead-letter writes that failed (not acked)
//	millrace.panics                counter   handler panics recovered
//	millrace.handler.duration      histogram seconds per handler call
//	millrace.attempts              histogram the attempt at which a message ended
//	millrace.time_to_outcome       histogram seconds from the first attempt to the final outcome
//
// With an idempotency guard (idempotency.ForRouter), the router registers its instruments too:
//
//	millrace.idempotency.claims    counter   claims by millrace.result (acquired, done, busy,
//	                                         unavailable, lease_lost)
//	millrace.idempotency.fail_open counter   handler runs without a lease (Config.FailOpen)
//	millrace.lease_store.memory.used  gauge  a RedisStore node's used_memory, per server.address
//	millrace.lease_store.memory.max   gauge  its maxmemory (0 = no limit)
//	millrace.lease_store.evicted_keys counter its evicted_keys
//
// And where the adapter is a millrace.BacklogReporter, the broker's gauges (ObserveBacklog):
// millrace.backlog.waiting, millrace.backlog.in_flight, millrace.retries.waiting,
// millrace.dead_letter.depth, millrace.partition.lag.
//
// A retry counts RETRY in deliveries and one in retries; an exhausted message counts its last
// RETRY and one exhausted dead letter. The attribute sets are made once per handler, so
// recording allocates nothing for them.
//
// # Traces
//
// One span per delivery, "process <topic>", kind consumer, a child of the producer's trace
// context read from the message metadata (W3C traceparent by default); it carries the attempt
// number, the outcome and reason, the retry delay, the message UUID and the broker's native id.
// A delivery makes one attempt unless the policy has immediate attempts (RetryPolicy.Immediate):
// then each handler call gets a span of its own, "attempt <topic>", a child of the delivery's
// span with its attempt number, outcome and reason, linked to the call before it in that
// delivery (HandlerInfo.ImmediateAttempts). Links between deliveries and the dead letter's
// trace then name the delivery's span, the parent of its attempts' spans.
// Each span writes its own context under AttemptTraceHeader, and the next attempt's span links
// to the attempt before (LinkedAttempt reads it) on every adapter that declares
// millrace.Capabilities.CarriesAttemptTrace: memory and Kafka, whose retry is a new copy that
// carries it; RabbitMQ, whose retry with tracing on is a confirmed copy (not a reject into the
// first tier, which could not change the headers); Redis Streams, which keeps it in its retry
// state beside the entry's due time and puts it back on the redelivered entry. SQS and NATS
// deliver the original again, whose attributes or headers cannot change between deliveries:
// there the attempts are siblings under the producer's span, without links. The conformance
// test TraceContextSurvivesRetries requires the two links of its three attempts where the
// adapter declares the capability.
// Every dead letter millrace writes records the last attempt's span context, on every adapter,
// in the record itself (deadletter.Record.Trace, key millrace-dlq-trace, a W3C traceparent
// whatever the propagator): RecordTrace reads it, and `millrace dlq show` prints its trace and
// span id.
package telemetry
