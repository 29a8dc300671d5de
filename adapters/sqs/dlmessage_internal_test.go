package sqs

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"

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
	m, err := deadLetterMessage(rec.Message(), limit)
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
	msg, _ := marshaler{}.Unmarshal(received(m, "1"))
	if d := takeDelivery(msg.Metadata, "t", "u"); d.decodeErr != nil {
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

// TestDeadLetterMessageTrimsInOrder: metadata goes first, then record fields are cut, then only
// reason and attempts stay, then the body travels alone; the body is never changed.
func TestDeadLetterMessageTrimsInOrder(t *testing.T) {
	const limit = 4096
	meta := map[string]string{"small": "s", "large": strings.Repeat("L", 300)}
	rec := deadletter.Record{UUID: "uuid-1", Metadata: meta, Reason: deadletter.Exhausted, Attempts: 5,
		LastError: strings.Repeat("é", 1000), OriginalTopic: "orders", Broker: "sqs", Handler: "h"}
	rec.Payload = []byte("b")
	whole, err := deadLetterMessage(rec.Message(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	overhead := messageSize(whole) - 1 // everything but the body
	cases := []struct {
		slack int
		check func(t *testing.T, m *message.Message)
	}{
		{overhead, func(t *testing.T, m *message.Message) { // fits whole
			if r := readBack(t, m); r.Metadata["large"] == "" || len(r.LastError) != 2000 {
				t.Fatalf("trimmed needlessly: %q", m.Metadata)
			}
		}},
		{overhead - 1, func(t *testing.T, m *message.Message) { // the large entry dropped first
			r := readBack(t, m)
			if _, ok := r.Metadata["large"]; ok || r.Metadata["small"] != "s" || m.Metadata[KeyTrimmed] != "metadata: large" {
				t.Fatalf("metadata %q", m.Metadata)
			}
		}},
		{600, func(t *testing.T, m *message.Message) { // fields cut
			r := readBack(t, m)
			if len(r.Metadata) != 0 || len(r.LastError) > 256 || r.OriginalTopic != "orders" || r.Attempts != 5 ||
				!strings.Contains(m.Metadata[KeyTrimmed], "cut: "+deadletter.KeyLastError) {
				t.Fatalf("record %+v note %q", r, m.Metadata[KeyTrimmed])
			}
		}},
		{150, func(t *testing.T, m *message.Message) { // only reason and attempts
			r := readBack(t, m)
			if r.Reason != deadletter.Exhausted || r.Attempts != 5 || r.LastError != "" {
				t.Fatalf("record %+v", r)
			}
		}},
		{10, func(t *testing.T, m *message.Message) { // body alone
			if len(m.Metadata) != 0 {
				t.Fatalf("metadata %q", m.Metadata)
			}
		}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.slack), func(t *testing.T) {
			rec := rec
			rec.Payload = []byte(strings.Repeat("b", limit-c.slack))
			c.check(t, deliveredDeadLetter(t, rec, limit))
		})
	}
	rec.Payload = []byte(strings.Repeat("b", limit+1))
	if _, err := deadLetterMessage(rec.Message(), limit); !errors.Is(err, ErrDeadLetterTooLarge) {
		t.Fatalf("body over the limit: %v, want ErrDeadLetterTooLarge", err)
	}
}
