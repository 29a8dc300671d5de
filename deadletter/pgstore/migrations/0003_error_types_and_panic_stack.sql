-- Version 3: Record.ErrorTypes, the Go types of the last error and of its causes, outermost
-- first (NULL = none recorded), and Record.PanicStack, a recovered panic's stack from the panic
-- on ('' = none). Both are bounded as package deadletter bounds them (at most 16 types of at
-- most 256 bytes, 1 KiB in all; 8 KiB of stack). Rows written before read back with neither.
-- A constant default adds the columns without rewriting the table.
ALTER TABLE {{.Table}} ADD COLUMN error_types text[];
ALTER TABLE {{.Table}} ADD COLUMN panic_stack text NOT NULL DEFAULT '';
