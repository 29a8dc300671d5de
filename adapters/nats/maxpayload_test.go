package nats

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/millrace/millrace/deadletter"
)

// msgSize counts what nats.go checks against the server's max_payload: a message of exactly
// max_payload is published, one byte more is refused.
func TestMsgSizeIsTheServersCount(t *testing.T) {
	nc := testConn(t)
	limit := nc.MaxPayload()
	subject := uniqueSubject(t)
	m := nats.NewMsg(subject)
	m.Header.Set("millrace-dlq-reason", "exhausted")
	m.Header.Add("x-multi", "a")
	m.Header.Add("x-multi", "bc")
	m.Data = make([]byte, int(limit-msgSize(m)))
	if got := msgSize(m); got != limit {
		t.Fatalf("msgSize %d, want %d", got, limit)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatalf("a message of max_payload (%d) bytes refused: %v", limit, err)
	}
	m.Data = append(m.Data, 0)
	if err := nc.PublishMsg(m); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("a message of max_payload+1 bytes: %v, want nats.ErrMaxPayload", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Near max_payload a dead letter leaves out the panic stack, then the error types, and nothing
// else; away from it, nothing.
func TestFitMaxPayloadDropsStackThenTypes(t *testing.T) {
	rec := deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 3, LastError: "panic: boom",
		ErrorTypes: []string{"*millrace.PanicError", strings.Repeat("T", 200)},
		PanicStack: strings.Repeat("example.com/app.frame(...)\n\t/src/app/file.go:12 +0x1d\n", 100)}
	orig := nats.Header{"x-trace": {"t"}}
	full := msgSize(deadLetterMsg("s.dlq", orig, nil, rec))
	noStack := rec
	noStack.PanicStack = ""
	withoutStack := msgSize(deadLetterMsg("s.dlq", orig, nil, noStack))
	noStack.ErrorTypes = nil
	withoutBoth := msgSize(deadLetterMsg("s.dlq", orig, nil, noStack))
	const limit = 1 << 20
	for _, c := range []struct {
		name         string
		data         int64
		stack, types bool
	}{
		{"fits", limit - full, true, true},
		{"fits without the stack", limit - withoutStack, false, true},
		{"fits without both", limit - withoutBoth, false, false},
		{"too large even without both", limit - withoutBoth + 1, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := fitMaxPayload(deadLetterMsg("s.dlq", orig, make([]byte, c.data), rec), limit)
			if (m.Header.Get(deadletter.KeyPanicStack) != "") != c.stack || (m.Header.Get(deadletter.KeyErrorTypes) != "") != c.types {
				t.Fatalf("stack kept %v, types kept %v; want %v, %v", m.Header.Get(deadletter.KeyPanicStack) != "", m.Header.Get(deadletter.KeyErrorTypes) != "", c.stack, c.types)
			}
			if m.Header.Get(deadletter.KeyLastError) != rec.LastError || m.Header.Get("x-trace") != "t" || len(m.Data) != int(c.data) {
				t.Fatal("fitMaxPayload changed more than the stack and the types")
			}
			if c.name != "too large even without both" && msgSize(m) > limit {
				t.Fatalf("%d bytes, limit %d", msgSize(m), limit)
			}
		})
	}
	if m := fitMaxPayload(deadLetterMsg("s.dlq", orig, make([]byte, limit), rec), 0); m.Header.Get(deadletter.KeyPanicStack) == "" {
		t.Fatal("max_payload 0 (unknown) dropped the stack")
	}
}
