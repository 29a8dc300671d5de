package sqs

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace/deadletter"
)

// readBack unmarshals m as the subscriber does and decodes the record.
func readBack(t *testing.T, m *message.Message) deadletter.Record {
	t.Helper()
	r, err := deadletter.FromMessage(m)
	if err != nil {
		t.Fatalf("FromMessage: %v (metadata %q)", err, m.Metadata)
	}
	return r
}

func deliveredDeadLetter(t *testing.T, rec deadletter.Record, limit int) *message.Message {
	t.Helper()
	m, err := deadLetterMessage(rec.Message(), limit, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := messageSize(m); n > limit {
		t.Fatalf("dead letter of %d bytes, limit %d", n, limit)
	}
	if len(m.MessageAttributes) > MaxAttributes {
		t.Fatalf("%d attributes", len(m.MessageAttributes))
	}
	if aws.ToString(m.Body) != string(rec.Payload) {
		t.Fatal("body altered")
	}
	msg, d := decodeMessage(received(m, "1"))
	if d.decodeErr != nil {
		t.Fatal(d.decodeErr)
	}
	return msg
}

// TestDeadLetterMessageBinaryPacked: non-UTF-8 values among more metadata than fits as
// attributes travel base64-encoded in AttrMetadataBinary and read back byte for byte.
func TestDeadLetterMessageBinaryPacked(t *testing.T) {
	meta := md(12, "v")
	meta["bin"] = "\xff\x00\xfe"
	rec := deadletter.Record{UUID: "u", Payload: []byte("p"), Metadata: meta, Reason: deadletter.Exhausted,
		Attempts: 3, LastError: "e\xff", OriginalTopic: "t", Broker: "sqs"}
	r := readBack(t, deliveredDeadLetter(t, rec, FallbackMaxMessageSize))
	if r.Metadata["bin"] != "\xff\x00\xfe" || r.Metadata["k11"] != "v" || len(r.Metadata) != 13 || r.LastError != "e\uFFFD" {
		t.Fatalf("record %+v", r)
	}
}

// TestDeadLetterMessageTrimsInOrder: the record gives way before the original content: record
// fields are cut, then only reason and attempts stay, then the original message travels alone
// and whole, and only then is original metadata dropped (largest first); the body is never
// changed.
func TestDeadLetterMessageTrimsInOrder(t *testing.T) {
	const limit = 4096
	meta := map[string]string{"small": "s", "large": strings.Repeat("L", 300)}
	rec := deadletter.Record{UUID: "uuid-1", Metadata: meta, Reason: deadletter.Exhausted, Attempts: 5,
		LastError: strings.Repeat("é", 1000), OriginalTopic: "orders", Broker: "sqs", Handler: "h"}
	rec.Payload = []byte("b")
	whole, err := deadLetterMessage(rec.Message(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	overhead := messageSize(whole) - 1 // everything but the body
	minimal := messageSize(encode("uuid-1", nil, map[string]string{deadletter.KeyReason: "exhausted",
		deadletter.KeyAttempts: "5", KeyTrimmed: "record fields"}, meta, nil))
	original := messageSize(encode("", nil, nil, meta, nil))
	cases := []struct {
		name  string
		slack int
		check func(t *testing.T, m *message.Message)
	}{
		{"whole", overhead, func(t *testing.T, m *message.Message) {
			if r := readBack(t, m); r.Metadata["large"] == "" || len(r.LastError) != 2000 {
				t.Fatalf("trimmed needlessly: %q", m.Metadata)
			}
		}},
		{"fields cut, metadata kept", overhead - 1, func(t *testing.T, m *message.Message) {
			r := readBack(t, m)
			if r.Metadata["large"] != meta["large"] || r.Metadata["small"] != "s" || len(r.LastError) > 256 || r.OriginalTopic != "orders" ||
				r.Attempts != 5 || !strings.Contains(m.Metadata[KeyTrimmed], "cut: "+deadletter.KeyLastError) {
				t.Fatalf("record %+v note %q", r, m.Metadata[KeyTrimmed])
			}
		}},
		{"only reason and attempts, metadata kept", minimal, func(t *testing.T, m *message.Message) {
			r := readBack(t, m)
			if r.Reason != deadletter.Exhausted || r.Attempts != 5 || r.LastError != "" || r.Metadata["large"] != meta["large"] {
				t.Fatalf("record %+v", r)
			}
		}},
		{"the original alone, whole", original, func(t *testing.T, m *message.Message) {
			if len(m.Metadata) != 2 || m.Metadata["large"] != meta["large"] || m.Metadata["small"] != "s" {
				t.Fatalf("metadata %q", m.Metadata)
			}
		}},
		{"the largest entry dropped", original - 1, func(t *testing.T, m *message.Message) {
			if len(m.Metadata) != 1 || m.Metadata["small"] != "s" {
				t.Fatalf("metadata %q", m.Metadata)
			}
		}},
		{"body alone", 10, func(t *testing.T, m *message.Message) {
			if len(m.Metadata) != 0 {
				t.Fatalf("metadata %q", m.Metadata)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := rec
			rec.Payload = []byte(strings.Repeat("b", limit-c.slack))
			c.check(t, deliveredDeadLetter(t, rec, limit))
		})
	}
	rec.Payload = []byte(strings.Repeat("b", limit+1))
	if _, err := deadLetterMessage(rec.Message(), limit, nil); !errors.Is(err, ErrDeadLetterTooLarge) {
		t.Fatalf("body over the limit: %v, want ErrDeadLetterTooLarge", err)
	}
}

// TestDeadLetterMessageKeepsTypes: each original attribute keeps its SQS data type (Number,
// Binary holding UTF-8 bytes, a custom String type, an escaped millrace-dlq-* name), whether
// the metadata travels as attributes or packed.
func TestDeadLetterMessageKeepsTypes(t *testing.T) {
	for _, extra := range []int{0, 12} {
		t.Run(fmt.Sprint(extra, " more entries"), func(t *testing.T) {
			in := &types.Message{Body: aws.String("b"), MessageId: aws.String("mid"), Attributes: map[string]string{"ApproximateReceiveCount": "1"},
				MessageAttributes: map[string]types.MessageAttributeValue{
					"n":                   {DataType: aws.String("Number"), StringValue: aws.String("42.5")},
					"b":                   {DataType: aws.String("Binary"), BinaryValue: []byte("utf8 bytes")},
					"j":                   {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)},
					"millrace-dlq-reason": {DataType: aws.String("Number.int"), StringValue: aws.String("7")},
				}}
			for i := range extra {
				in.MessageAttributes[fmt.Sprint("e", i)] = stringAttr("v")
			}
			msg, d := decodeMessage(in)
			rec := deadletter.Record{UUID: msg.UUID, Payload: msg.Payload, Metadata: msg.Metadata, Reason: deadletter.Malformed, Attempts: 1, OriginalTopic: "t"}
			m, err := deadLetterMessage(rec.Message(), FallbackMaxMessageSize, d.types)
			if err != nil {
				t.Fatal(err)
			}
			back, d2 := decodeMessage(received(m, "1"))
			r := readBack(t, back)
			for k, v := range in.MessageAttributes {
				want := aws.ToString(v.StringValue)
				if v.BinaryValue != nil {
					want = string(v.BinaryValue)
				}
				if r.Metadata[k] != want {
					t.Fatalf("%s = %q, want %q", k, r.Metadata[k], want)
				}
				if wt := aws.ToString(v.DataType); wt != "String" && d2.types[deadletter.EscapeKey(k)] != wt {
					t.Fatalf("%s read back as type %q, want %q (types %v)", k, d2.types[deadletter.EscapeKey(k)], wt, d2.types)
				}
			}
			if extra == 0 {
				if got := m.MessageAttributes["n"]; aws.ToString(got.DataType) != "Number" {
					t.Fatalf("n sent as %q", aws.ToString(got.DataType))
				}
			}
		})
	}
}
