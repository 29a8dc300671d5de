package kafka

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/IBM/sarama"
	"github.com/millrace/millrace/deadletter"
)

func hdr(k, v string) *sarama.RecordHeader {
	return &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)}
}

// A dead letter of a record whose headers repeat a name keeps them all: Record.Native lists
// the original headers in order, names unescaped, values exact; the record keys decode.
func TestDecodeKeepsRepeatedHeaders(t *testing.T) {
	m := &sarama.ConsumerMessage{Partition: 1, Offset: 7, Value: []byte{0, 0xff}, Headers: []*sarama.RecordHeader{
		hdr("trace", "a"),
		hdr("millrace-dlq-esc.millrace-dlq-reason", "forged"),
		hdr("trace", "\x00\xff"),
		hdr("millrace-attempt", "3"),
		hdr(deadletter.KeyReason, "exhausted"),
		hdr(deadletter.KeyAttempts, "3"),
		hdr(deadletter.KeyOriginalTopic, "orders"),
		hdr(KeyOriginalHeaders, "3"),
	}}
	e := decode(m)
	if e.Record.Reason != deadletter.Exhausted || e.Record.Attempts != 3 || e.Record.OriginalTopic != "orders" {
		t.Fatalf("record %+v", e.Record)
	}
	want := []deadletter.Field{
		{Name: "trace", Type: NativeHeader, Value: []byte("a")},
		{Name: "millrace-dlq-reason", Type: NativeHeader, Value: []byte("forged")},
		{Name: "trace", Type: NativeHeader, Value: []byte("\x00\xff")},
	}
	if !fieldsEqual(e.Record.Native, want) {
		t.Fatalf("native %q, want %q", e.Record.Native, want)
	}
	if e.Record.Metadata["millrace-dlq-reason"] != "forged" || e.Record.Metadata["millrace-attempt"] != "3" {
		t.Fatalf("metadata %q", e.Record.Metadata)
	}
}

// A record in the dead-letter topic that millrace did not write is shown raw: every header, in
// order, when a map cannot hold them.
func TestDecodeForeignRecordRaw(t *testing.T) {
	m := &sarama.ConsumerMessage{Value: []byte("v"), Headers: []*sarama.RecordHeader{hdr("a", "1"), hdr("a", "2"), hdr(deadletter.KeyAttempts, "0")}}
	e := decode(m)
	if e.Record.Reason != "" || len(e.Record.Native) != 3 || string(e.Record.Native[1].Value) != "2" {
		t.Fatalf("record %+v", e.Record)
	}
}

func fieldsEqual(a, b []deadletter.Field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Type != b[i].Type || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// parseHeaders reads fuzz input as headers: [key length][key][value length][value]...
func parseHeaders(b []byte) []*sarama.RecordHeader {
	var hs []*sarama.RecordHeader
	for len(b) >= 2 {
		kl := int(b[0])
		if 1+kl >= len(b) {
			break
		}
		k := b[1 : 1+kl]
		b = b[1+kl:]
		vl := int(b[0])
		if 1+vl > len(b) {
			break
		}
		hs = append(hs, &sarama.RecordHeader{Key: k, Value: b[1 : 1+vl]})
		b = b[1+vl:]
	}
	return hs
}

// FuzzDeadLetterStoreDecode decodes arbitrary dead-letter records: never a panic; a decoded record has a
// valid reason and at least one attempt, or none at all (shown raw); Native, when set, is the
// original headers exactly; allocation stays proportional to the bytes present.
func FuzzDeadLetterStoreDecode(f *testing.F) {
	enc := func(kv ...string) []byte {
		var b []byte
		for _, s := range kv {
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
		return b
	}
	f.Add([]byte("payload"), enc("a", "1", "a", "2", deadletter.KeyReason, "malformed", deadletter.KeyAttempts, "1", KeyOriginalHeaders, "2"))
	f.Add([]byte{0xff}, enc(deadletter.KeyReason, "exhausted", deadletter.KeyAttempts, "-3"))
	f.Add([]byte{}, enc(deadletter.KeyReason, "exhausted", deadletter.KeyAttempts, "99999999999999999999999"))
	f.Add([]byte("x"), enc(KeyOriginalHeaders, "4294967296", deadletter.KeyReason, "discarded", deadletter.KeyAttempts, "1"))
	f.Add([]byte("x"), enc(deadletter.KeyReason, "discarded", deadletter.KeyAttempts, "1", deadletter.KeyLastFailure, "yesterday"))
	f.Fuzz(func(t *testing.T, value, headers []byte) {
		hs := parseHeaders(headers)
		m := &sarama.ConsumerMessage{Value: value, Headers: hs}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		e := decode(m)
		runtime.ReadMemStats(&after)
		n := len(value) + len(headers)
		if got := after.TotalAlloc - before.TotalAlloc; got > uint64(64*n+64<<10) {
			t.Fatalf("decoding %d bytes allocated %d", n, got)
		}
		r := e.Record
		if r.Reason != "" && (!r.Reason.Valid() || r.Attempts < 1) {
			t.Fatalf("decoded an impossible record: reason %q attempts %d", r.Reason, r.Attempts)
		}
		if !bytes.Equal(r.Payload, value) {
			t.Fatalf("payload %x, want %x", r.Payload, value)
		}
		if r.Native != nil {
			if !repeatsName(r.Native) || len(r.Native) > len(hs) {
				t.Fatalf("native %q set without repeated names", r.Native)
			}
			for i, fd := range r.Native {
				k, _ := deadletter.OriginalKey(string(hs[i].Key))
				if r.Reason == "" {
					k = string(hs[i].Key)
				}
				if fd.Name != k || !bytes.Equal(fd.Value, hs[i].Value) {
					t.Fatalf("native field %d %q=%q, header %q=%q", i, fd.Name, fd.Value, hs[i].Key, hs[i].Value)
				}
			}
		}
	})
}
