package kafka

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

var _ deadletter.NativeSource = (*Adapter)(nil)

// NativeContent returns the original headers of the record msg was delivered from (its own
// headers, without millrace's retry state), in order, names as sent, Type NativeHeader, as
// DeadLetterStore reads them into Record.Native, when two of them share a name (which
// Metadata, a map, cannot hold); nil when no name repeats, or when this adapter's subscriber did
// not deliver msg. The record's value is msg.Payload.
func (a *Adapter) NativeContent(msg *message.Message) []deadletter.Field {
	d, ok := deliveryFrom(msg.Context())
	if !ok {
		return nil
	}
	seen := make(map[string]struct{}, len(d.orig))
	repeats := false
	for _, h := range d.orig {
		if h == nil {
			continue
		}
		if _, dup := seen[string(h.Key)]; dup {
			repeats = true
			break
		}
		seen[string(h.Key)] = struct{}{}
	}
	if !repeats {
		return nil
	}
	out := make([]deadletter.Field, 0, len(d.orig))
	for _, h := range d.orig {
		if h != nil {
			out = append(out, deadletter.Field{Name: string(h.Key), Type: NativeHeader, Value: append([]byte(nil), h.Value...)})
		}
	}
	return out
}
