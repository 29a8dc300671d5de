package nats

import (
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
)

// Publisher returns a publisher that writes each message to the stream of its topic, creating
// the stream when it does not exist, and waits for JetStream's acknowledgement (PubAck) of
// each: Publish returns nil only once every message is stored.
func (a *Adapter) Publisher() message.Publisher { return publisher{a} }

type publisher struct{ a *Adapter }

// Publish stores msgs on topic, in order. The UUID goes in the UUIDHeader header, each
// metadata key in a header of the same name (NATS keeps header names as written), or, for a
// key that is no valid NATS header name, of the name KeyHexPrefix + its hex.
func (p publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.a.isClosed() {
		return fmt.Errorf("nats: publish to %q: adapter closed", topic)
	}
	for _, msg := range msgs {
		ctx := msg.Context()
		if err := p.a.ensureStream(ctx, topic); err != nil {
			return err
		}
		m, err := natsMsg(topic, msg)
		if err != nil {
			return err
		}
		if _, err := p.a.js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("nats: publish message %s to %q: %w", msg.UUID, topic, err)
		}
	}
	return nil
}

// Close does nothing: the adapter owns the connection.
func (publisher) Close() error { return nil }

// natsMsg encodes msg for subject; it refuses metadata NATS headers cannot carry.
func natsMsg(subject string, msg *message.Message) (*nats.Msg, error) {
	m := nats.NewMsg(subject)
	m.Data = msg.Payload
	m.Header.Set(UUIDHeader, msg.UUID)
	for k, v := range msg.Metadata {
		if k == "" || k == UUIDHeader {
			return nil, fmt.Errorf("nats: message %s: metadata key %q: must be non-empty and not %q", msg.UUID, k, UUIDHeader)
		}
		if strings.ContainsAny(v, "\r\n") || strings.TrimLeft(v, " \t") != v {
			return nil, fmt.Errorf("nats: message %s: metadata %q: value must have no line breaks and no leading whitespace (NATS headers drop it)", msg.UUID, k)
		}
		m.Header.Set(encodeKey(k), v)
	}
	return m, nil
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}
