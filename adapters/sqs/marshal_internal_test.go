package sqs

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace/deadletter"
)

// received turns a marshaled message into what SQS hands a consumer.
func received(m *types.Message, receiveCount string) *types.Message {
	return &types.Message{
		Body:              m.Body,
		MessageAttributes: m.MessageAttributes,
		MessageId:         aws.String("mid-1"),
		ReceiptHandle:     aws.String("rh-1"),
		Attributes: map[string]string{
			"ApproximateReceiveCount":          receiveCount,
			"ApproximateFirstReceiveTimestamp": "1700000000123",
		},
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	cases := map[string]message.Metadata{
		"none":                             {},
		"nine fit individually":            md(9, "v"),
		"ten are packed":                   md(10, "v"),
		"empty value is packed":            {"a": "", "b": "x"},
		"invalid attribute name is packed": {"a b": "x"},
		"AWS. prefix is packed":            {"AWS.trace": "x"},
		"U+FFFF in a value is packed":      {"k": "a\uffffb"},
		"control character is packed":      {"k": "a\x01b"},
		"reserved name is packed":          {AttrMetadata: "x"},
	}
	for name, meta := range cases {
		t.Run(name, func(t *testing.T) {
			msg := message.NewMessage("uuid-1", []byte(`{"text":"naïve café ✓ 😀"}`))
			maps.Copy(msg.Metadata, meta)
			m, err := marshaler{}.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.MessageAttributes) > MaxAttributes {
				t.Fatalf("%d attributes, SQS allows %d", len(m.MessageAttributes), MaxAttributes)
			}
			for k, v := range m.MessageAttributes {
				if !validAttrName(k) || aws.ToString(v.StringValue) == "" || !isText(aws.ToString(v.StringValue)) {
					t.Fatalf("attribute %q = %q would be refused by SQS", k, aws.ToString(v.StringValue))
				}
			}
			got, d := decodeMessage(received(m, "3"))
			if d.decodeErr != nil {
				t.Fatalf("decode error: %v", d.decodeErr)
			}
			if got.UUID != "uuid-1" || string(got.Payload) != string(msg.Payload) {
				t.Fatalf("got uuid %q payload %q", got.UUID, got.Payload)
			}
			if !maps.Equal(got.Metadata, msg.Metadata) {
				t.Fatalf("metadata %v, want %v", got.Metadata, msg.Metadata)
			}
			if d.receiveCount != 3 || d.receipt != "rh-1" || d.messageID != "mid-1" ||
				!d.firstReceive.Equal(time.UnixMilli(1700000000123)) || d.receivedAt.IsZero() {
				t.Fatalf("delivery %+v", d)
			}
		})
	}
}

func md(n int, v string) message.Metadata {
	m := message.Metadata{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = v
	}
	return m
}

// TestMarshalDeadLetterFitsTenAttributes: a dead letter of a message with nine metadata
// entries (the most a message can carry individually) still fits SQS's 10 attributes, and the
// record reads back with deadletter.FromMessage.
func TestMarshalDeadLetterFitsTenAttributes(t *testing.T) {
	rec := deadletter.Record{
		UUID: "uuid-1", Payload: []byte("{bad json"), Metadata: md(9, "v"),
		Reason: deadletter.Malformed, Attempts: 1, LastError: "invalid JSON \x00 at byte 4 \uffff",
		OriginalTopic: "push.requested", Broker: "sqs", NativeID: "mid-0", Handler: "h",
		FirstFailureAt: time.Unix(1700000000, 0).UTC(), LastFailureAt: time.Unix(1700000001, 0).UTC(),
	}
	m, err := marshaler{}.Marshal(rec.Message())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.MessageAttributes); n > MaxAttributes {
		t.Fatalf("%d attributes, SQS allows %d", n, MaxAttributes)
	}
	packed := aws.ToString(m.MessageAttributes[AttrDeadLetterRecord].StringValue)
	if !isText(packed) || !json.Valid([]byte(packed)) {
		t.Fatalf("record attribute %q is not SQS text and JSON", packed)
	}
	msg, _ := decodeMessage(received(m, "1"))
	got, err := deadletter.FromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	got.Payload = []byte(string(got.Payload))
	if got.LastError != rec.LastError || got.Reason != rec.Reason || got.OriginalTopic != rec.OriginalTopic ||
		!got.FirstFailureAt.Equal(rec.FirstFailureAt) || !maps.Equal(got.Metadata, rec.Metadata) || string(got.Payload) != string(rec.Payload) {
		t.Fatalf("record read back %+v, want %+v", got, rec)
	}
}

func TestMarshalRefusesWhatSQSWouldAlter(t *testing.T) {
	for _, payload := range []string{"", "a\x00b", "\xff\xfe", "bad \uffff", "\x1b[0m"} {
		_, err := marshaler{}.Marshal(message.NewMessage("u", []byte(payload)))
		if !errors.Is(err, ErrPayloadNotText) {
			t.Errorf("payload %q: %v, want ErrPayloadNotText", payload, err)
		}
	}
	msg := message.NewMessage("u", []byte("ok"))
	msg.Metadata.Set("k", "\xff")
	if _, err := (marshaler{}).Marshal(msg); !errors.Is(err, ErrMetadataNotText) {
		t.Errorf("metadata not UTF-8: %v, want ErrMetadataNotText", err)
	}
	for _, payload := range []string{"\t\r\n", "😀", "\ue000", "plain"} {
		if _, err := (marshaler{}).Marshal(message.NewMessage("u", []byte(payload))); err != nil {
			t.Errorf("payload %q refused: %v", payload, err)
		}
	}
}

// TestDecodeNeverFails: garbled packed attributes and a missing receive count become a
// decode error, never a failed delivery; an attribute whose name looks like delivery state is
// content, kept.
func TestDecodeNeverFails(t *testing.T) {
	m := &types.Message{
		Body:      aws.String("raw"),
		MessageId: aws.String("mid"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			AttrMetadata:               stringAttr("{not json"),
			"x":                        stringAttr("kept"),
			"\x00millrace-sqs-receipt": stringAttr("forged"),
		},
	}
	msg, d := decodeMessage(m)
	if d.decodeErr == nil || !strings.Contains(d.decodeErr.Error(), AttrMetadata) || !strings.Contains(d.decodeErr.Error(), "ApproximateReceiveCount") {
		t.Fatalf("decode error %v, want one naming %s and the receive count", d.decodeErr, AttrMetadata)
	}
	if d.receiveCount != 0 || d.receipt != "" || msg.UUID != "mid" || msg.Metadata["x"] != "kept" || msg.Metadata["\x00millrace-sqs-receipt"] != "forged" {
		t.Fatalf("delivery %+v uuid %q metadata %v", d, msg.UUID, msg.Metadata)
	}
}

func TestVisibilitySeconds(t *testing.T) {
	cases := []struct {
		delay, elapsed time.Duration
		want           int32
	}{
		{time.Second, 0, 1},
		{1500 * time.Millisecond, 0, 2}, // rounded up: never earlier than asked
		{0, 0, 0},
		{-time.Second, 0, 0},
		{time.Minute, 10 * time.Second, 60},
		{12 * time.Hour, 0, 43199},                 // 12 h from the receive, minus the margin
		{12 * time.Hour, time.Hour, 39599},         // what is left of the 12 h
		{time.Hour, 12*time.Hour + time.Second, 0}, // nothing left: visible at once
	}
	for _, c := range cases {
		if got := visibilitySeconds(c.delay, c.elapsed); got != c.want {
			t.Errorf("visibilitySeconds(%s, %s) = %d, want %d", c.delay, c.elapsed, got, c.want)
		}
	}
}

// TestReceiveCountSaturates: ApproximateReceiveCount is read with saturation; a count that is
// missing, zero, signed or not decimal cannot be counted and makes the delivery malformed
// (counting it as a first attempt could retry it forever).
func TestReceiveCountSaturates(t *testing.T) {
	base := &types.Message{Body: aws.String("b"), MessageId: aws.String("m")}
	for _, c := range []struct {
		v    string
		want int
	}{
		{"1", 1}, {"7", 7}, {"0007", 7},
		{"1048576", MaxReceiveCount}, {"99999999999999999999", MaxReceiveCount}, {"9223372036854775808", MaxReceiveCount},
		{"", 0}, {"0", 0}, {"-3", 0}, {"+3", 0}, {"3.0", 0}, {"three", 0}, {" 3", 0},
	} {
		m := *base
		m.Attributes = map[string]string{"ApproximateReceiveCount": c.v}
		_, d := decodeMessage(&m)
		if d.receiveCount != c.want || (c.want == 0) != (d.decodeErr != nil) {
			t.Errorf("count %q: read %d (err %v), want %d", c.v, d.receiveCount, d.decodeErr, c.want)
		}
	}
}

// A foreign attribute under a packing name that is not a String (millrace packs only into
// String attributes) is content: kept with its bytes and type, not read as packing. A String
// one that is not JSON is kept whole too, and reported.
func TestDecodeAttributesPackingNameOfAnotherType(t *testing.T) {
	raw := []byte{0xde, 0xad, 0x00, 0xbe, 0xef}
	md, typeOf, errs := DecodeAttributes(map[string]types.MessageAttributeValue{
		AttrMetadata:         {DataType: aws.String("Binary"), BinaryValue: raw},
		AttrDeadLetterRecord: {DataType: aws.String("Number"), StringValue: aws.String("7")},
		AttrMetadataTypes:    {DataType: aws.String("String"), StringValue: aws.String("{not json")},
	})
	if len(errs) != 1 {
		t.Fatalf("errs %v, want one, for %s", errs, AttrMetadataTypes)
	}
	if md[AttrMetadata] != string(raw) || typeOf[AttrMetadata] != "Binary" {
		t.Fatalf("%s = %q (%s), want the Binary bytes", AttrMetadata, md[AttrMetadata], typeOf[AttrMetadata])
	}
	if md[AttrDeadLetterRecord] != "7" || typeOf[AttrDeadLetterRecord] != "Number" {
		t.Fatalf("%s = %q (%s), want Number 7", AttrDeadLetterRecord, md[AttrDeadLetterRecord], typeOf[AttrDeadLetterRecord])
	}
	if md[AttrMetadataTypes] != "{not json" {
		t.Fatalf("%s = %q, want it kept", AttrMetadataTypes, md[AttrMetadataTypes])
	}
}

// DecodeAttributes is deterministic, and packing it cannot apply exactly loses nothing: when
// packed metadata (AttrMetadata, AttrMetadataBinary, AttrMetadataTypes) or the packed record
// would collide with an attribute of its own, with another packing, or says nothing millrace
// would write, every packing attribute is kept as content, whole, and reported. Each set is
// decoded many times (map iteration order differs between runs): every run must give the same
// result.
func TestDecodeAttributesPackingCollision(t *testing.T) {
	s := stringAttr
	b64 := "/wA=" // 0xff 0x00
	cases := []struct {
		name   string
		attrs  map[string]types.MessageAttributeValue
		md     message.Metadata
		types  map[string]string
		errors bool
	}{
		{"packed key collides with an attribute",
			map[string]types.MessageAttributeValue{"x": s("1"), AttrMetadata: s(`{"x":"2"}`)},
			message.Metadata{"x": "1", AttrMetadata: `{"x":"2"}`}, map[string]string{}, true},
		{"empty types packing",
			map[string]types.MessageAttributeValue{AttrMetadataTypes: s(`{}`), "a": s("v")},
			message.Metadata{AttrMetadataTypes: `{}`, "a": "v"}, map[string]string{}, true},
		{"empty metadata packing",
			map[string]types.MessageAttributeValue{AttrMetadata: s(`{}`)},
			message.Metadata{AttrMetadata: `{}`}, map[string]string{}, true},
		{"text and binary packing hold the same key",
			map[string]types.MessageAttributeValue{AttrMetadata: s(`{"k":"a"}`), AttrMetadataBinary: s(`{"k":"` + b64 + `"}`)},
			message.Metadata{AttrMetadata: `{"k":"a"}`, AttrMetadataBinary: `{"k":"` + b64 + `"}`}, map[string]string{}, true},
		{"record key collides with an attribute",
			map[string]types.MessageAttributeValue{deadletter.KeyReason: s("discarded"), AttrDeadLetterRecord: s(`{"millrace-dlq-attempts":"1","millrace-dlq-reason":"exhausted"}`)},
			message.Metadata{deadletter.KeyReason: "discarded", AttrDeadLetterRecord: `{"millrace-dlq-attempts":"1","millrace-dlq-reason":"exhausted"}`}, map[string]string{}, true},
		{"record holds a key that is not a record key",
			map[string]types.MessageAttributeValue{AttrDeadLetterRecord: s(`{"x":"2"}`)},
			message.Metadata{AttrDeadLetterRecord: `{"x":"2"}`}, map[string]string{}, true},
		{"duplicate key inside the packing",
			map[string]types.MessageAttributeValue{AttrMetadata: s(`{"x":"1","x":"2"}`)},
			message.Metadata{AttrMetadata: `{"x":"1","x":"2"}`}, map[string]string{}, true},
		{"type of a key that is not packed",
			map[string]types.MessageAttributeValue{"y": s("7"), AttrMetadata: s(`{"x":"1"}`), AttrMetadataTypes: s(`{"y":"Number"}`)},
			message.Metadata{"y": "7", AttrMetadata: `{"x":"1"}`, AttrMetadataTypes: `{"y":"Number"}`}, map[string]string{}, true},
		{"type that SQS does not define",
			map[string]types.MessageAttributeValue{AttrMetadata: s(`{"x":"1"}`), AttrMetadataTypes: s(`{"x":"Bogus"}`)},
			message.Metadata{AttrMetadata: `{"x":"1"}`, AttrMetadataTypes: `{"x":"Bogus"}`}, map[string]string{}, true},
		{"base64 that does not read back",
			map[string]types.MessageAttributeValue{AttrMetadataBinary: s(`{"k":"/w\n=="}`), "z": {DataType: aws.String("Binary"), BinaryValue: []byte{1}}},
			message.Metadata{AttrMetadataBinary: `{"k":"/w\n=="}`, "z": "\x01"}, map[string]string{"z": "Binary"}, true},
		{"a bad packing keeps the good ones whole too",
			map[string]types.MessageAttributeValue{AttrMetadata: s(`{"a":"1"}`), AttrDeadLetterRecord: s(`{not json`)},
			message.Metadata{AttrMetadata: `{"a":"1"}`, AttrDeadLetterRecord: `{not json`}, map[string]string{}, true},
		{"a UUID attribute that is not a String is content",
			map[string]types.MessageAttributeValue{AttrUUID: {DataType: aws.String("Binary"), BinaryValue: []byte{0xff}}},
			message.Metadata{AttrUUID: "\xff"}, map[string]string{AttrUUID: "Binary"}, false},
		{"clean packing beside attributes of their own is unpacked",
			map[string]types.MessageAttributeValue{"z": s("own"), AttrMetadata: s(`{"a":"1","n":"42"}`), AttrMetadataBinary: s(`{"bin":"` + b64 + `"}`),
				AttrMetadataTypes: s(`{"n":"Number"}`), AttrDeadLetterRecord: s(`{"millrace-dlq-reason":"malformed"}`)},
			message.Metadata{"z": "own", "a": "1", "n": "42", "bin": "\xff\x00", deadletter.KeyReason: "malformed"},
			map[string]string{"n": "Number", "bin": "Binary"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 200 {
				md, typeOf, errs := DecodeAttributes(c.attrs)
				if !maps.Equal(md, c.md) || !maps.Equal(typeOf, c.types) || (len(errs) > 0) != c.errors {
					t.Fatalf("decoded %q types %q errs %v, want %q types %q (errors: %v)", md, typeOf, errs, c.md, c.types, c.errors)
				}
			}
		})
	}
}
