package deadletter

import "github.com/ThreeDotsLabs/watermill/message"

// NativeSource is implemented by an adapter that can give back a delivery's native content: the
// content as the broker held it, for a message whose Payload and Metadata do not hold it whole
// (a Redis entry that is not exactly a Watermill message, a Kafka record whose headers repeat a
// name, typed AMQP headers or SQS attributes). Code that writes a Record for such a message
// outside the adapter's own DeadLetter (a store decorator such as package sink) sets
// Record.Native from it, so the store keeps, shows and replays the original exactly.
type NativeSource interface {
	// NativeContent returns msg's native content in the broker's order, with the Type and Value
	// encodings the adapter's own dead-letter store uses in Record.Native, or nil when Payload
	// and Metadata hold the content whole or msg was not delivered by this adapter. The result
	// is the caller's; the adapter does not retain or modify it.
	NativeContent(msg *message.Message) []Field
}
