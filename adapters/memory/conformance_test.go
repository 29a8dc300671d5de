package memory_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/conformance"
	"github.com/millrace/millrace/deadletter"
)

type harness struct{}

func (harness) NewAdapter(context.Context, testing.TB) (millrace.Adapter, error) {
	return memory.New(memory.Config{})
}

func (harness) Options() conformance.Options {
	return conformance.Options{Delay: 200 * time.Millisecond, Tolerance: 300 * time.Millisecond, Quiet: 300 * time.Millisecond}
}

func TestConformance(t *testing.T) { conformance.Run(t, harness{}) }

var _ conformance.Foreign = harness{}

// foreign publishes a message with the given metadata straight onto the broker, as any producer
// (not millrace's retry path) would.
func foreign(uuid string, payload []byte, md map[string]string) func(context.Context, testing.TB, millrace.Adapter, string) (conformance.Content, error) {
	return func(_ context.Context, _ testing.TB, a millrace.Adapter, topic string) (conformance.Content, error) {
		msg := message.NewMessage(uuid, payload)
		for k, v := range md {
			msg.Metadata[k] = v
		}
		return conformance.MetadataContent(payload, md), a.(*memory.Adapter).Publish(topic, msg)
	}
}

func (harness) ForeignCases() []conformance.ForeignCase {
	attempt := func(v string) map[string]string { return map[string]string{millrace.HeaderAttempt: v, "x-app": "kept"} }
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := bytes.Repeat([]byte{0xfe, 0x00, 'x'}, 4<<20/3)
	return []conformance.ForeignCase{
		{Name: "attempt header MaxInt64", Kinds: []conformance.Kind{conformance.KindOverflow, conformance.KindForgedKeys}, Publish: foreign("overflow", []byte("o"), attempt("9223372036854775807"))},
		{Name: "attempt header negative", Kinds: []conformance.Kind{conformance.KindNegative}, Publish: foreign("negative", []byte("n"), attempt("-5"))},
		{Name: "attempt header zero", Kinds: []conformance.Kind{conformance.KindZero}, Publish: foreign("zero", []byte("z"), attempt("0"))},
		{Name: "attempt header 10^23", Kinds: []conformance.Kind{conformance.KindHuge}, Publish: foreign("huge", []byte("h"), attempt("99999999999999999999999"))},
		{Name: "attempt header text", Kinds: []conformance.Kind{conformance.KindNonNumeric}, Publish: foreign("text", []byte("t"), attempt("two"))},
		{Name: "first-attempt time not a time", Kinds: []conformance.Kind{conformance.KindWrongType}, Publish: foreign("wrong-type", []byte("w"),
			map[string]string{millrace.HeaderFirstAttemptAt: "yesterday", millrace.HeaderNotBefore: "2999-01-01T00:00:00Z"})},
		{Name: "attempt header empty", Kinds: []conformance.Kind{conformance.KindEmpty}, Publish: foreign("empty", []byte("e"), attempt(""))},
		{Name: "no uuid", Kinds: []conformance.Kind{conformance.KindMissing}, Publish: foreign("", []byte("m"), nil)},
		{Name: "record keys forged", Kinds: []conformance.Kind{conformance.KindForgedKeys}, Publish: foreign("forged", []byte("f"), map[string]string{
			deadletter.KeyReason: "discarded", deadletter.KeyAttempts: "-3", deadletter.EscapePrefix + "x": "y",
			millrace.HeaderOriginalTopic: "elsewhere", millrace.HeaderLastError: "forged error", millrace.HeaderAttempt: "2",
		})},
		{Name: "binary payload", Kinds: []conformance.Kind{conformance.KindBinaryPayload}, Publish: foreign("binary", binary, map[string]string{"bin": "\x00\xff"})},
		{Name: "empty payload", Kinds: []conformance.Kind{conformance.KindEmptyPayload}, Publish: foreign("empty-payload", nil, nil)},
		{Name: "4 MiB payload", Kinds: []conformance.Kind{conformance.KindSizeLimit}, Publish: foreign("big", big, nil)},
	}
}

func (harness) NotApplicable() map[conformance.Kind]string {
	return map[conformance.Kind]string{conformance.KindDuplicated: "metadata is a map: a producer cannot give a key twice"}
}

func (harness) DeadLetterContents(_ context.Context, _ testing.TB, a millrace.Adapter, topic string) ([]conformance.Content, error) {
	var out []conformance.Content
	for _, m := range a.(*memory.Adapter).Peek(a.DeadLetterTopic(topic)) {
		rec, err := deadletter.FromMessage(m)
		if err != nil {
			return nil, err
		}
		out = append(out, conformance.MetadataContent(rec.Payload, rec.Metadata))
	}
	return out, nil
}

func (harness) Settled(_ context.Context, _ testing.TB, a millrace.Adapter, topic string) error {
	if n := a.(*memory.Adapter).Outstanding(topic); n != 0 {
		return fmt.Errorf("%d message(s) waiting, in flight or scheduled for a retry", n)
	}
	return nil
}
