-- Version 2: Record.Native (the original content as the broker held it, where payload and
-- metadata cannot hold it exactly: a foreign Redis entry's fields in order, repeated Kafka
-- headers, typed AMQP headers or SQS attributes). NULL = the record has none. A JSON array of
-- {"name": text, "type": text, "value": base64 (std)}; a name or type that jsonb cannot hold as
-- a string (NUL, invalid UTF-8) is written base64 (std) under "name_base64" / "type_base64".
ALTER TABLE {{.Table}} ADD COLUMN native jsonb CHECK (native IS NULL OR jsonb_typeof(native) = 'array');
-- Attempts made is at least 1. NOT VALID: it holds for every row written from now on without
-- failing the migration on rows an older build wrote; Get and List report such a row as not a
-- valid dead letter (empty reason, the reason in last_error) instead of returning it as one.
ALTER TABLE {{.Table}} ADD CONSTRAINT attempts_positive CHECK (attempts >= 1) NOT VALID;
