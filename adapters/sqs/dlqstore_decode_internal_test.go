package sqs

import (
	"encoding/base64"
	"runtime"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace/deadletter"
)

func str(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// A stored dead letter reads as the adapter's subscriber reads it: packed binary metadata
// comes back byte for byte (not as a millrace-metadata-binary entry), and attribute types
// other than String are in Record.Native.
func TestDecodeReadsPackedBinaryAndTypes(t *testing.T) {
	m := types.Message{MessageId: aws.String("mid"), Body: aws.String("body"), MessageAttributes: map[string]types.MessageAttributeValue{
		AttrDeadLetterRecord: str(`{"millrace-dlq-reason":"malformed","millrace-dlq-attempts":"1","millrace-dlq-original-topic":"t"}`),
		AttrMetadata:         str(`{"a":"1","n":"42"}`),
		AttrMetadataBinary:   str(`{"bin":"` + base64.StdEncoding.EncodeToString([]byte{0xff, 0x00}) + `"}`),
		AttrMetadataTypes:    str(`{"n":"Number"}`),
	}}
	r := decode(m).Record
	if r.Reason != deadletter.Malformed || r.Metadata["bin"] != "\xff\x00" || r.Metadata["a"] != "1" || len(r.Metadata) != 3 {
		t.Fatalf("record %+v", r)
	}
	want := map[string]string{"a": "String", "bin": "Binary", "n": "Number"}
	if len(r.Native) != 3 {
		t.Fatalf("native %q", r.Native)
	}
	for _, f := range r.Native {
		if want[f.Name] != f.Type || string(f.Value) != r.Metadata[f.Name] {
			t.Fatalf("native field %+v", f)
		}
	}
}

// fuzzAttrs reads fuzz input as attributes: [name len][name][type len][type][value len][value]...
func fuzzAttrs(b []byte) map[string]types.MessageAttributeValue {
	attrs := map[string]types.MessageAttributeValue{}
	next := func() (string, bool) {
		if len(b) < 1 || 1+int(b[0]) > len(b) {
			return "", false
		}
		s := string(b[1 : 1+int(b[0])])
		b = b[1+int(b[0]):]
		return s, true
	}
	for {
		k, ok1 := next()
		ty, ok2 := next()
		v, ok3 := next()
		if !ok1 || !ok2 || !ok3 {
			return attrs
		}
		a := types.MessageAttributeValue{DataType: aws.String(ty)}
		if len(ty) > 0 && ty[0] == 'B' {
			a.BinaryValue = []byte(v)
		} else {
			a.StringValue = aws.String(v)
		}
		attrs[k] = a
	}
}

// FuzzDeadLetterStoreDecode reads arbitrary dead-letter messages: never a panic; a decoded record has a valid
// reason and at least one attempt, or is shown raw; the body is the payload byte for byte;
// Native values equal the metadata they describe; allocation stays proportional to the bytes
// present.
func FuzzDeadLetterStoreDecode(f *testing.F) {
	enc := func(kv ...string) []byte {
		var b []byte
		for _, s := range kv {
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
		return b
	}
	f.Add("body", enc(AttrDeadLetterRecord, "String", `{"millrace-dlq-reason":"exhausted","millrace-dlq-attempts":"3"}`, "n", "Number", "1"))
	f.Add("body", enc(AttrDeadLetterRecord, "String", `{"millrace-dlq-reason":"exhausted","millrace-dlq-attempts":"0"}`))
	f.Add("body", enc(AttrDeadLetterRecord, "String", `{"millrace-dlq-reason":"exhausted","millrace-dlq-attempts":"-1"}`))
	f.Add("b", enc(AttrMetadataBinary, "String", `{"k":"!!notbase64"}`, AttrMetadataTypes, "String", `{"k":"Bogus"}`))
	f.Add("b", enc(AttrMetadata, "String", `{"a":`, "x", "Binary", "\xff", "millrace-dlq-esc.millrace-dlq-reason", "String.x", "v"))
	f.Fuzz(func(t *testing.T, body string, raw []byte) {
		m := types.Message{MessageId: aws.String("mid"), Body: aws.String(body), MessageAttributes: fuzzAttrs(raw)}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		e := decode(m)
		runtime.ReadMemStats(&after)
		n := len(body) + len(raw)
		if got := after.TotalAlloc - before.TotalAlloc; got > uint64(64*n+64<<10) {
			t.Fatalf("decoding %d bytes allocated %d", n, got)
		}
		r := e.Record
		if r.Reason != "" && (!r.Reason.Valid() || r.Attempts < 1) {
			t.Fatalf("impossible record: reason %q attempts %d", r.Reason, r.Attempts)
		}
		if string(r.Payload) != body {
			t.Fatal("payload differs from the body")
		}
		names := map[string]int{}
		for _, fd := range r.Native {
			names[fd.Name]++
		}
		for _, fd := range r.Native {
			if v := r.Metadata[fd.Name]; names[fd.Name] == 1 && v != string(fd.Value) {
				t.Fatalf("native %+v disagrees with metadata %q", fd, v)
			}
		}
	})
}
