package amqp

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/deadletter"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// fuzzValue builds an AMQP value from fuzz bytes (each value takes at least one byte), so the
// fuzzer explores typed headers rather than bytes amqp091 would refuse to decode.
func fuzzValue(b *[]byte, depth int) any {
	next := func() byte {
		if len(*b) == 0 {
			return 0
		}
		c := (*b)[0]
		*b = (*b)[1:]
		return c
	}
	str := func() string {
		n := min(int(next()%24), len(*b))
		s := string((*b)[:n])
		*b = (*b)[n:]
		return s
	}
	switch next() % 12 {
	case 0:
		return nil
	case 1:
		return next()&1 == 1
	case 2:
		return int8(next())
	case 3:
		return int16(next())<<8 | int16(next())
	case 4:
		return int32(next()) << 24
	case 5:
		return int64(next()) << 56
	case 6:
		return float64(next()) / 3
	case 7:
		return amqp091.Decimal{Scale: next(), Value: int32(next())}
	case 8:
		return time.Unix(int64(next())<<24, 0)
	case 9:
		return []byte(str())
	case 10:
		if depth < 3 {
			n := int(next() % 5)
			t := amqp091.Table{}
			a := []any{}
			for range n {
				t[str()] = fuzzValue(b, depth+1)
				a = append(a, fuzzValue(b, depth+1))
			}
			if next()&1 == 1 {
				return a
			}
			return t
		}
	}
	return str()
}

// FuzzDeadLetterStoreDecode: any message in a dead-letter queue decodes (no panic) into an entry with a
// 16-hex-digit ID and the body unchanged; a record's attempts are at least 1; Native holds only
// the non-string, non-history headers, in name order, each with a valid AMQP tag and an
// encoding bounded by the input's size; the same message always gives the same entry.
func FuzzDeadLetterStoreDecode(f *testing.F) {
	f.Add([]byte{}, "exhausted", "3", "2026-01-01T00:00:00Z", []byte("body"))
	f.Add([]byte{4, 1, 'r', 4, 7, 0, 1, 'x', 9, 2, 0, 0xff}, "exhausted", "0", "not a time", []byte{0, 0xff})
	f.Add([]byte{10, 4}, "malformed", "-3", "", []byte{})
	f.Add([]byte{2, 5, 'm', 'i', 'l', 'l'}, "discarded", "9223372036854775808", "2026-13-01T00:00:00Z", []byte{1})
	f.Fuzz(func(t *testing.T, data []byte, reason, attempts, failed string, body []byte) {
		size := len(data)
		h := amqp091.Table{
			deadletter.KeyReason: reason, deadletter.KeyAttempts: attempts, deadletter.KeyLastFailure: failed,
			deadletter.EscapePrefix + deadletter.KeyReason: "forged",
		}
		for len(data) > 0 {
			var name string
			if n := min(int(data[0]%16), len(data)-1); n > 0 {
				name = string(data[1 : 1+n])
				data = data[1+n:]
			} else {
				data = data[1:]
			}
			h[name] = fuzzValue(&data, 0)
		}
		if failed == "" {
			delete(h, deadletter.KeyLastFailure)
		}
		s := &DeadLetterStore{}
		d := amqp091.Delivery{Headers: h, Body: body, MessageId: reason}
		e := s.decode(d)
		if _, err := hex.DecodeString(e.ID); err != nil || len(e.ID) != 16 {
			t.Fatalf("ID %q", e.ID)
		}
		if string(e.Record.Payload) != string(body) {
			t.Fatal("body changed")
		}
		if e.Record.Reason.Valid() && e.Record.Attempts < 1 {
			t.Fatalf("record with %d attempts", e.Record.Attempts)
		}
		if e.Record.Reason.Valid() && e.Record.Metadata[deadletter.KeyReason] != "forged" ||
			!e.Record.Reason.Valid() && e.Record.Metadata[deadletter.EscapePrefix+deadletter.KeyReason] != "forged" {
			t.Fatalf("escaped foreign key lost: %v", e.Record.Metadata) // an undecodable record shows the raw keys
		}
		total := 0
		for i, fd := range e.Record.Native {
			if i > 0 && e.Record.Native[i-1].Name >= fd.Name {
				t.Fatalf("Native not in name order: %q then %q", e.Record.Native[i-1].Name, fd.Name)
			}
			if BrokerOwned(fd.Name) || strings.HasPrefix(fd.Name, deadletter.KeyPrefix) && !strings.HasPrefix(fd.Name, deadletter.EscapePrefix) {
				t.Fatalf("Native holds %q", fd.Name)
			}
			if len(fd.Type) != 1 || !strings.Contains("VtbBsuIilfdDSxTAF", fd.Type) {
				t.Fatalf("Native type %q", fd.Type)
			}
			if _, isString := h[deadletter.EscapeKey(fd.Name)].(string); isString {
				t.Fatalf("string header %q in Native", fd.Name)
			}
			total += len(fd.Value)
		}
		if total > 32*(size+1) {
			t.Fatalf("Native encodes %d bytes from %d bytes of input", total, size)
		}
		if again := s.decode(d); again.ID != e.ID || len(again.Record.Native) != len(e.Record.Native) {
			t.Fatal("decoding is not deterministic")
		}
	})
}
