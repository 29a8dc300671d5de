package kafka

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// fuzzHeaders reads fuzz input as headers: [key length][key][value length][value]...
func fuzzHeaders(b []byte) []*sarama.RecordHeader {
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

func encHeaders(kv ...string) []byte {
	var b []byte
	for _, s := range kv {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b
}

func ptrs(hs []sarama.RecordHeader) []*sarama.RecordHeader {
	out := make([]*sarama.RecordHeader, len(hs))
	for i := range hs {
		out[i] = &hs[i]
	}
	return out
}

func sameHeaders(a, b []*sarama.RecordHeader) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// FuzzRecordHeaders drives a record's headers through everything that decodes them: the split
// into original content and retry state, the attempt decoder, the retry copy and the
// dead-letter builder. Invariants: no panic; nothing of a source-topic record is state; the
// attempt lies in [1, MaxAttemptNumber]; a retry copy read back has the same original headers
// exactly and the attempt it was written with; a dead letter gives back the original headers
// exactly (OriginalHeaders) and a record FromMessage accepts with the reason and attempts
// written; allocation stays proportional to the bytes present.
func FuzzRecordHeaders(f *testing.F) {
	f.Add(encHeaders("trace", "a", "trace", "b"), false, uint32(2))
	f.Add(encHeaders(millrace.HeaderAttempt, "9223372036854775807", springAttempts, "\x7f\xff\xff\xff"), false, uint32(1))
	f.Add(encHeaders(millrace.HeaderAttempt, "3", HeaderOriginalHeaders, "0"), true, uint32(4))
	f.Add(encHeaders("a", "1", millrace.HeaderAttempt, "2", HeaderOriginalHeaders, "1"), true, uint32(3))
	f.Add(encHeaders(HeaderOriginalHeaders, "4294967296", millrace.HeaderAttempt, "2"), true, uint32(3))
	f.Add(encHeaders(HeaderOriginalHeaders, "-1", millrace.HeaderAttempt, "2"), true, uint32(3))
	f.Add(encHeaders(deadletter.KeyReason, "exhausted", "millrace-dlq-esc.x", "y", KeyOriginalHeaders, "9"), false, uint32(1))
	f.Add(encHeaders("_watermill_message_uuid", "u", "_watermill_message_uuid", "v"), false, uint32(1))
	f.Add([]byte{}, true, uint32(0))
	f.Fuzz(func(t *testing.T, raw []byte, retry bool, next uint32) {
		hs := fuzzHeaders(raw)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		orig, state, splitErr := splitHeaders(hs, retry)
		a, stateMD, err := attemptState(state, retry)
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > uint64(64*len(raw)+16<<10) {
			t.Fatalf("decoding %d bytes of headers allocated %d", len(raw), got)
		}
		if len(orig) > len(hs) || !sameHeaders(orig, hs[:len(orig)]) {
			t.Fatal("original headers are not a prefix of the record's")
		}
		if !retry && (len(state) != 0 || splitErr != nil || err != nil || a.Number != 1) {
			t.Fatalf("source-topic headers read as state: %d state headers, attempt %d, %v %v", len(state), a.Number, splitErr, err)
		}
		if a.Number < 1 || a.Number > MaxAttemptNumber {
			t.Fatalf("attempt %d", a.Number)
		}

		d := &delivery{RecordInfo: RecordInfo{Topic: "t", Partition: 1, Offset: 2, Timestamp: time.UnixMilli(1700000000000)},
			source: "t", fromRetryTopic: retry, orig: orig, state: state, stateMD: stateMD}
		n := int(next%MaxAttemptNumber) + 1
		st := message.Metadata{}
		millrace.SetRetryHeaders(st, millrace.Attempt{Number: n, OriginalTopic: "t"}, time.UnixMilli(1700000000000))
		cp := ptrs(retryHeaders(d, "uuid-1", st))
		orig2, state2, err2 := splitHeaders(cp, true)
		if err2 != nil || !sameHeaders(orig2, orig) {
			t.Fatalf("retry copy: original headers not kept (%v)", err2)
		}
		a2, _, err2 := attemptState(state2, true)
		if err2 != nil || a2.Number != n {
			t.Fatalf("retry copy read back as attempt %d (%v), written %d", a2.Number, err2, n)
		}
		if m := toMessage(&sarama.ConsumerMessage{Headers: cp}); m.UUID != "uuid-1" {
			t.Fatalf("retry copy UUID %q", m.UUID)
		}

		rec := deadletter.Record{UUID: "uuid-1", Reason: deadletter.Exhausted, Attempts: n, OriginalTopic: "t", Broker: BrokerName}
		dl := ptrs(deadLetterHeaders(d, rec))
		back, ok := OriginalHeaders(dl)
		if !ok || len(back) != len(orig) {
			t.Fatalf("dead letter: %d original headers back (%v), want %d", len(back), ok, len(orig))
		}
		for i, h := range orig {
			if back[i].Name != string(h.Key) || !bytes.Equal(back[i].Value, h.Value) {
				t.Fatalf("dead letter header %d: %q=%q, want %q=%q", i, back[i].Name, back[i].Value, h.Key, h.Value)
			}
		}
		dlMsg := toMessage(&sarama.ConsumerMessage{Headers: dl})
		got, err := deadletter.FromMessage(dlMsg)
		if err != nil || got.Reason != rec.Reason || got.Attempts != n || got.OriginalTopic != "t" || got.UUID != "uuid-1" {
			t.Fatalf("dead letter record %+v, %v", got, err)
		}
		// millrace's state never overrides an original header: each original name reads back
		// with the original's (last) value.
		for _, h := range orig {
			k := string(h.Key)
			if k == wmkafka.UUIDHeaderKey || strings.HasPrefix(k, deadletter.KeyPrefix) {
				continue
			}
			if v, _ := lastValue(orig, k); got.Metadata[k] != v {
				t.Fatalf("dead letter metadata %q = %q, the original header says %q", k, got.Metadata[k], v)
			}
		}
		if !retry {
			if o, ok := DeadLetterOrigin(dlMsg.Metadata); !ok || o != (Origin{Topic: "t", Partition: 1, Offset: 2}) {
				t.Fatalf("origin %+v %v", o, ok)
			}
			if _, forged := lastValue(orig, HeaderOriginalTimestamp); !forged && got.Metadata[HeaderOriginalTimestamp] != strconv.FormatInt(1700000000000, 10) {
				t.Fatalf("timestamp %q", got.Metadata[HeaderOriginalTimestamp])
			}
		}
	})
}
