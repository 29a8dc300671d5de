// Package pgstore keeps dead letters in a PostgreSQL table (PostgreSQL 12 or newer, pgx v5),
// where operators list, inspect, replay and purge them with `millrace dlq`, and where SQL can
// reach them too.
//
// One row per dead letter:
//
//	column           | type        | from the Record
//	-----------------+-------------+------------------------------------------------------------
//	id               | bigint      | store-assigned (identity); the Entry ID, in decimal
//	message_uuid     | text        | UUID
//	reason           | text        | Reason (discarded, exhausted, malformed)
//	attempts         | integer     | Attempts
//	last_error       | text        | LastError
//	original_topic   | text        | OriginalTopic
//	original_key     | text        | OriginalKey ('' = none)
//	broker           | text        | Broker
//	native_id        | text        | NativeID ('' = none)
//	handler          | text        | Handler
//	first_failure_at | timestamptz | FirstFailureAt (NULL = unknown)
//	last_failure_at  | timestamptz | LastFailureAt (NULL = unknown); the time filters use it
//	payload          | bytea       | Payload, byte for byte
//	metadata         | jsonb       | Metadata entries whose key and value are valid UTF-8 without NUL
//	metadata_binary  | jsonb       | the other Metadata entries, key and value base64 (std) encoded
//	stored_at        | timestamptz | when the row was written (the Entry's StoredAt)
//	native           | jsonb       | Native (NULL = none): see below
//	error_types      | text[]      | ErrorTypes (NULL = none), bounded by deadletter.BoundErrorTypes
//	panic_stack      | text        | PanicStack ('' = none), bounded by deadletter.BoundPanicStack
//	trace            | text        | Trace (NULL = none), a traceparent checked by deadletter.ValidTrace
//
// Payload and metadata round-trip exactly. So does Native, the original content as the broker
// held it where Payload and Metadata cannot hold it (a foreign Redis entry's fields, Kafka
// headers that repeat a name, typed AMQP headers or SQS attributes; package sink fills it from
// the adapter): a JSON array, in order, of {"name": text, "type": text (absent when ""),
// "value": base64 (std)}, a name or type that jsonb cannot hold as text being written base64
// under "name_base64" / "type_base64". A row without it (one written before schema version 2
// included) reads back with nil Native.
//
// error_types and panic_stack (schema version 3) hold ErrorTypes and PanicStack within the
// bounds of package deadletter, applied again when a row is read; a row written before version 3
// reads back with neither.
//
// trace (schema version 4) holds Trace, the W3C traceparent of the span of the attempt that gave
// up: Put writes it only when deadletter.ValidTrace holds (NULL otherwise), the table CHECKs that
// layout for every row written since, and a row is validated again when read (a value that is
// not a valid traceparent reads back as no trace). A row written before version 4 has none.
//
// attempts is at least 1: Put refuses a record with fewer, and the table CHECKs it for every
// row written since schema version 2. A row that breaks it (written by an older build or by
// hand), or whose native column does not decode, is still returned by Get and List, content and
// context kept, but not as a valid dead letter: Reason empty, Attempts 0, and LastError saying
// why ("not a millrace dead letter: ...; last error: <the row's last_error>"), as the broker
// stores report entries they cannot decode. The text columns hold PostgreSQL text, which cannot
// carry NUL or invalid UTF-8: such bytes are replaced by U+FFFD rather than failing the write,
// because a dead-letter write that can never succeed would leave its message redelivered forever.
// Timestamps keep microseconds (PostgreSQL's precision).
//
// A delivery that is dead-lettered again (its acknowledgement failed after the row was written)
// is recognised by (broker, original_topic, native_id, message_uuid) and not stored twice.
//
// The schema is created and upgraded by Migrate from SQL files embedded in the package, recorded
// per table in millrace_schema_migrations and applied under an advisory lock, so any number of
// processes may call Migrate at start-up at the same time.
package pgstore
