package redisstream

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/conformance"
	"github.com/millrace/millrace/deadletter"
)

// The harness is a foreign producer for the hostile-input battery (conformance.Foreign): it
// appends entries with XADD, fields in the order given, and reads dead letters back raw.

var _ conformance.Foreign = harness{}

// metadataOf returns the msgpack metadata field of md, as watermill-redisstream writes it.
func metadataOf(md map[string]string) string {
	msg := message.NewMessage("x", nil)
	for k, v := range md {
		msg.Metadata.Set(k, v)
	}
	f, err := wire.Marshal(msg)
	if err != nil {
		panic(err)
	}
	return f[5]
}

// rawCase is a case that appends fields (names and values alternating) exactly.
func rawCase(name string, kinds []conformance.Kind, fields ...string) conformance.ForeignCase {
	return conformance.ForeignCase{Name: name, Kinds: kinds,
		Publish: func(ctx context.Context, _ testing.TB, a millrace.Adapter, topic string) (conformance.Content, error) {
			if err := a.(*Adapter).Client().XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: fields}).Err(); err != nil {
				return conformance.Content{}, err
			}
			return conformance.Content{Fields: wire.NativeFields(fields)}, nil
		}}
}

// ForeignCases: framing that claims more than it holds, wrong types, repeated and missing
// fields, forged millrace keys (top-level and in the metadata), attempt headers a producer set,
// binary and empty payloads.
func (harness) ForeignCases() []conformance.ForeignCase {
	k := func(ks ...conformance.Kind) []conformance.Kind { return ks }
	return []conformance.ForeignCase{
		rawCase("metadata map32 claiming 2^32-1 entries (issue 12 defect 1)", k(conformance.KindHuge),
			FieldUUID, "u-1", FieldPayload, "{}", FieldMetadata, "\xdf\xff\xff\xff\xff"),
		rawCase("metadata str32 value claiming 2^32-1 bytes", k(conformance.KindOverflow),
			FieldUUID, "u-1", FieldPayload, "{}", FieldMetadata, "\x81\xa1k\xdb\xff\xff\xff\xff"),
		rawCase("millrace-attempt -5 in the metadata", k(conformance.KindNegative),
			FieldUUID, "u-1", FieldPayload, "{}", FieldMetadata, metadataOf(map[string]string{millrace.HeaderAttempt: "-5"})),
		rawCase("millrace-attempt 0 in the metadata", k(conformance.KindZero),
			FieldUUID, "u-1", FieldPayload, "{}", FieldMetadata, metadataOf(map[string]string{millrace.HeaderAttempt: "0"})),
		rawCase("millrace-attempt text and 2^63-1 in the metadata", k(conformance.KindNonNumeric, conformance.KindOverflow),
			FieldUUID, "u-1", FieldPayload, "{}", FieldMetadata, metadataOf(map[string]string{millrace.HeaderAttempt: "many", "x": "9223372036854775807"})),
		rawCase("metadata value of type int", k(conformance.KindWrongType),
			FieldUUID, "u-1", FieldPayload, "{}", FieldMetadata, "\x81\xa1k\x05"),
		rawCase("empty UUID, payload and metadata", k(conformance.KindEmpty, conformance.KindEmptyPayload),
			FieldUUID, "", FieldPayload, "", FieldMetadata, ""),
		rawCase("payload field twice", k(conformance.KindDuplicated),
			FieldUUID, "u-1", FieldPayload, "one", FieldPayload, "two"),
		rawCase("no UUID field; foreign fields", k(conformance.KindMissing),
			"user", "u-5", "event", "legacy"),
		rawCase("top-level record fields and a record key in the metadata", k(conformance.KindForgedKeys),
			FieldUUID, "u-1", FieldPayload, "{}", deadletter.KeyReason, "discarded", deadletter.KeyAttempts, "99",
			FieldMetadata, metadataOf(map[string]string{deadletter.KeyReason: "discarded"})),
		rawCase("binary payload, fields in reverse order", k(conformance.KindBinaryPayload),
			FieldMetadata, "", FieldPayload, "\x00\xff\xfe\x80", FieldUUID, "u-1"),
		// Not the size limit (see NotApplicable), but large enough that the dead-letter script
		// and the raw reply parser carry megabytes, binary, through every step.
		rawCase("8 MiB binary payload", nil,
			FieldUUID, "u-big", FieldPayload, strings.Repeat("\x00\xfe\x80x", 2<<20), FieldMetadata, ""),
	}
}

// NotApplicable: the size limit of a Redis value is proto-max-bulk-len, 512 MB by default.
func (harness) NotApplicable() map[conformance.Kind]string {
	return map[conformance.Kind]string{
		conformance.KindSizeLimit: "a Redis value may be up to proto-max-bulk-len (512 MB by default); an entry that size needs gigabytes on the shared test machine",
	}
}

// DeadLetterContents reads the dead-letter stream raw and returns each entry's original fields
// (record fields removed, escaped names given back).
func (harness) DeadLetterContents(ctx context.Context, _ testing.TB, a millrace.Adapter, topic string) ([]conformance.Content, error) {
	v, err := a.(*Adapter).Client().Do(ctx, "XRANGE", a.DeadLetterTopic(topic), "-", "+").Result()
	if err != nil {
		return nil, err
	}
	entries, err := wire.ParseEntries(v)
	if err != nil {
		return nil, err
	}
	out := make([]conformance.Content, 0, len(entries))
	for _, e := range entries {
		original, _, err := wire.SplitDeadLetter(e.Fields)
		if err != nil {
			return nil, fmt.Errorf("dead letter %s: %w", e.ID, err)
		}
		out = append(out, conformance.Content{Fields: wire.NativeFields(original)})
	}
	return out, nil
}

// Settled reports the group's pending entries and the retry schedule of topic.
func (harness) Settled(ctx context.Context, _ testing.TB, am millrace.Adapter, topic string) error {
	a := am.(*Adapter)
	p, err := a.client.XPending(ctx, topic, a.cfg.Group).Result()
	if err != nil {
		return err
	}
	n, err := a.client.ZCard(ctx, a.retryKey(topic)).Result()
	if err != nil {
		return err
	}
	if p.Count != 0 || n != 0 {
		return fmt.Errorf("%d pending entries, %d scheduled retries", p.Count, n)
	}
	return nil
}
