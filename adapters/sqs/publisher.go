package sqs

import (
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// publisher is watermill-aws's publisher, refusing work after the adapter is closed.
type publisher struct {
	a   *Adapter
	pub *wmsqs.Publisher
}

// Publish sends msgs to topic's queue in order, stopping at the first error. A payload SQS
// cannot carry unchanged fails with ErrPayloadNotText before anything is sent for it.
func (p publisher) Publish(topic string, msgs ...*message.Message) error {
	p.a.mu.Lock()
	closed := p.a.closed
	p.a.mu.Unlock()
	if closed {
		return millrace.ErrClosed
	}
	return p.pub.Publish(topic, msgs...)
}

// Close does nothing: the adapter owns the connection.
func (p publisher) Close() error { return nil }
