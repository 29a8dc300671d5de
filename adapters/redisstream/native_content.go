package redisstream

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
)

var _ deadletter.NativeSource = (*Adapter)(nil)

// NativeContent returns the fields of the stream entry msg was delivered from, in stream order
// with repeated names kept (as DeadLetterStore reads them into Record.Native), when the
// entry is not exactly a Watermill message (wire.Decode fails on it); nil when it is one, or
// when this adapter's subscriber did not deliver msg.
func (a *Adapter) NativeContent(msg *message.Message) []deadletter.Field {
	d, ok := deliveryFrom(msg)
	if !ok || len(d.fields) == 0 {
		return nil
	}
	if _, _, _, err := wire.Decode(d.fields); err == nil {
		return nil
	}
	return wire.NativeFields(d.fields)
}
