-- Version 1: the dead-letter table and the indexes of `millrace dlq list` (filters by topic,
-- reason and time range, pages in id order).
CREATE TABLE {{.Table}} (
	id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_uuid     text        NOT NULL,
	reason           text        NOT NULL CHECK (reason IN ('discarded', 'exhausted', 'malformed')),
	attempts         integer     NOT NULL,
	last_error       text        NOT NULL DEFAULT '',
	original_topic   text        NOT NULL,
	original_key     text        NOT NULL DEFAULT '',
	broker           text        NOT NULL DEFAULT '',
	native_id        text        NOT NULL DEFAULT '',
	handler          text        NOT NULL DEFAULT '',
	first_failure_at timestamptz,
	last_failure_at  timestamptz,
	payload          bytea       NOT NULL,
	metadata         jsonb       NOT NULL DEFAULT '{}',
	metadata_binary  jsonb       NOT NULL DEFAULT '{}',
	stored_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- list --topic T (and replay of one topic), in id order.
CREATE INDEX {{.Index "topic"}} ON {{.Table}} (original_topic, id);
-- list --reason R, in id order.
CREATE INDEX {{.Index "reason"}} ON {{.Table}} (reason, id);
-- list --since/--until.
CREATE INDEX {{.Index "last_failure"}} ON {{.Table}} (last_failure_at);
-- One row per failed delivery: a dead letter written again after its acknowledgement failed is
-- recognised instead of stored twice.
CREATE UNIQUE INDEX {{.Index "delivery"}} ON {{.Table}} (broker, original_topic, native_id, message_uuid)
	WHERE native_id <> '';
