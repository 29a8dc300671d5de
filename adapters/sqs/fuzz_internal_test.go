package sqs

import (
	"maps"
	"runtime"
	"testing"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace/deadletter"
)

// fuzzStrings splits fuzz input into length-prefixed strings.
func fuzzStrings(b []byte) []string {
	var out []string
	for len(b) >= 1 && 1+int(b[0]) <= len(b) {
		out = append(out, string(b[1:1+int(b[0])]))
		b = b[1+int(b[0]):]
	}
	return out
}

func encStrings(ss ...string) []byte {
	var b []byte
	for _, s := range ss {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b
}

// FuzzMarshalRoundTrip: whatever Marshal accepts reads back (as the subscriber reads it) with
// the same UUID, payload and metadata, in at most MaxAttributes attributes SQS accepts.
func FuzzMarshalRoundTrip(f *testing.F) {
	f.Add("uuid", "payload", encStrings("a", "1", "b", ""))
	f.Add("u", "{}", encStrings("AWS.x", "1", AttrMetadata, "x", "millrace-dlq-reason", "exhausted", "k\x00", "v\uffff"))
	f.Add("u", "p", encStrings("1", "1", "2", "2", "3", "3", "4", "4", "5", "5", "6", "6", "7", "7", "8", "8", "9", "9", "10", "10"))
	f.Fuzz(func(t *testing.T, uuid, payload string, raw []byte) {
		kv := fuzzStrings(raw)
		msg := message.NewMessage(uuid, []byte(payload))
		for i := 0; i+1 < len(kv); i += 2 {
			msg.Metadata[kv[i]] = kv[i+1]
		}
		m, err := marshaler{}.Marshal(msg)
		if err != nil {
			return
		}
		if len(m.MessageAttributes) > MaxAttributes {
			t.Fatalf("%d attributes", len(m.MessageAttributes))
		}
		for k, v := range m.MessageAttributes {
			if !validAttrName(k) || (v.StringValue != nil && !isText(aws.ToString(v.StringValue))) {
				t.Fatalf("attribute %q = %q would be refused by SQS", k, aws.ToString(v.StringValue))
			}
		}
		got, d := decodeMessage(received(m, "1"))
		if d.decodeErr != nil {
			t.Fatalf("decode error %v", d.decodeErr)
		}
		if string(got.Payload) != payload || (uuid != "" && got.UUID != uuid) || !maps.Equal(got.Metadata, msg.Metadata) {
			t.Fatalf("read back uuid %q payload %q metadata %q, want %q %q %q", got.UUID, got.Payload, got.Metadata, uuid, payload, msg.Metadata)
		}
	})
}

// FuzzDecodeMessage reads arbitrary received messages and dead-letters them. Invariants: no
// panic; allocation proportional to the bytes present; the receive count is in
// [1, MaxReceiveCount], or the delivery is malformed; the dead letter fits the limit and
// SQS's 10 attributes, keeps the body byte for byte, carries a record FromMessage accepts
// (attempts >= 1) or none at all, and, when nothing was trimmed, every original value (of a
// UTF-8 name: SQS names are ASCII) with its type.
func FuzzDecodeMessage(f *testing.F) {
	f.Add("body", "3", encStrings("n", "Number", "42", "b", "Binary", "xyz", "j", "String.json", "{}"), uint16(4096))
	f.Add("body", "99999999999999999999", encStrings(AttrMetadata, "String", `{"\u0000millrace-sqs-decode-error":"x"}`), uint16(600))
	f.Add("b", "-1", encStrings(AttrMetadataBinary, "String", `{"k":"!!"}`, AttrMetadataTypes, "String", `{"k":"Binary"}`), uint16(300))
	f.Add("b", "0", encStrings(AttrDeadLetterRecord, "String", `{"millrace-dlq-reason":"exhausted"}`, "millrace-dlq-x", "Number", "1"), uint16(200))
	f.Add("b", "", encStrings("x", "Bogus", "v"), uint16(100))
	f.Fuzz(func(t *testing.T, body, count string, raw []byte, limit uint16) {
		ss := fuzzStrings(raw)
		attrs := map[string]types.MessageAttributeValue{}
		for i := 0; i+2 < len(ss); i += 3 {
			a := types.MessageAttributeValue{DataType: aws.String(ss[i+1])}
			if isBinaryType(ss[i+1]) {
				a.BinaryValue = []byte(ss[i+2])
			} else {
				a.StringValue = aws.String(ss[i+2])
			}
			attrs[ss[i]] = a
		}
		in := &types.Message{Body: aws.String(body), MessageId: aws.String("mid"), ReceiptHandle: aws.String("rh"),
			MessageAttributes: attrs, Attributes: map[string]string{"ApproximateReceiveCount": count}}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		msg, d := decodeMessage(in)
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > uint64(64*(len(body)+len(raw)+len(count))+16<<10) {
			t.Fatalf("decoding %d bytes allocated %d", len(body)+len(raw), got)
		}
		if (d.receiveCount == 0) != (d.decodeErr != nil && d.receiveCount == 0) || d.receiveCount < 0 || d.receiveCount > MaxReceiveCount {
			t.Fatalf("receive count %d, err %v", d.receiveCount, d.decodeErr)
		}
		if d.receiveCount == 0 && d.decodeErr == nil {
			t.Fatal("an uncountable delivery was not marked malformed")
		}
		rec := deadletter.Record{UUID: msg.UUID, Payload: msg.Payload, Metadata: msg.Metadata, Reason: deadletter.Malformed,
			Attempts: max(d.receiveCount, 1), LastError: "fuzz", OriginalTopic: "t", Broker: BrokerName}
		m, err := deadLetterMessage(rec.Message(), int(limit), d.types)
		if err != nil {
			return // body not SQS text, or larger than the limit on its own
		}
		if aws.ToString(m.Body) != body || messageSize(m) > int(limit) || len(m.MessageAttributes) > MaxAttributes {
			t.Fatalf("dead letter: body changed or %d bytes / %d attributes over the limit %d", messageSize(m), len(m.MessageAttributes), limit)
		}
		back, d2 := decodeMessage(received(m, "1"))
		r, err := deadletter.FromMessage(back)
		if err == nil && r.Attempts < 1 {
			t.Fatalf("attempts %d", r.Attempts)
		}
		if _, hasRecord := m.MessageAttributes[AttrDeadLetterRecord]; hasRecord && err != nil {
			t.Fatalf("dead letter with a record does not decode: %v", err)
		}
		if err == nil && d.decodeErr == nil && back.Metadata[KeyTrimmed] == "" {
			for k, v := range msg.Metadata {
				if !utf8.ValidString(k) {
					continue // SQS names are ASCII; a dead letter's names are made valid UTF-8
				}
				if r.Metadata[k] != v {
					t.Fatalf("metadata %q = %q, want %q", k, r.Metadata[k], v)
				}
				if d.types[k] != "" && d2.types[deadletter.EscapeKey(k)] != d.types[k] {
					t.Fatalf("type of %q = %q, want %q", k, d2.types[deadletter.EscapeKey(k)], d.types[k])
				}
			}
		}
	})
}
