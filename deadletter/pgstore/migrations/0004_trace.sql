-- Version 4: Record.Trace, the W3C traceparent of the span of the attempt that gave up (NULL =
-- none: tracing off, or a row written before). Put writes only a valid traceparent
-- (deadletter.ValidTrace); the CHECK holds it to that layout for every row written from now on.
-- A column without a default and a NOT VALID constraint change neither existing rows nor the
-- time the migration takes on a large table (every existing row is NULL, which the CHECK allows).
ALTER TABLE {{.Table}} ADD COLUMN trace text;
ALTER TABLE {{.Table}} ADD CONSTRAINT trace_traceparent CHECK (trace IS NULL OR (
	trace ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
	AND left(trace, 2) <> 'ff'
	AND substr(trace, 4, 32) <> repeat('0', 32)
	AND substr(trace, 37, 16) <> repeat('0', 16)
)) NOT VALID;
