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
//
// Payload and metadata round-trip exactly. The text columns hold PostgreSQL text, which cannot
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
