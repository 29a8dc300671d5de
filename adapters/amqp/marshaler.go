package amqp

import (
	"strings"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
)

// Metadata keys the subscriber sets on every received message. On publish, MetadataRoutingKey
// chooses the routing key and the property keys become AMQP properties; the other keys here
// describe one delivery and are never written back as headers.
const (
	// MetadataRoutingKey is the ORIGINAL routing key on every attempt: the millrace-original-key
	// header of a republished retry, or the first routing key of the work queue's oldest x-death
	// entry (by time, not array position; see the package documentation), or
	// the delivery's own key. Dispatch on it: after a trip through a retry tier the delivery's
	// own key is the queue name. On publish it is the routing key (default: the topic).
	MetadataRoutingKey = "amqp-routing-key"
	// MetadataDeliveryRoutingKey is the routing key of this delivery as RabbitMQ reports it.
	MetadataDeliveryRoutingKey = "amqp-delivery-routing-key"
	// MetadataExchange is the exchange this delivery came through ("" = default exchange).
	MetadataExchange = "amqp-exchange"
	// MetadataRedelivered is "true" when RabbitMQ flagged the delivery as redelivered.
	MetadataRedelivered = "amqp-redelivered"
	// MetadataContentType is the content-type property.
	MetadataContentType = "amqp-content-type"
	// MetadataContentEncoding is the content-encoding property.
	MetadataContentEncoding = "amqp-content-encoding"
	// MetadataCorrelationID is the correlation-id property.
	MetadataCorrelationID = "amqp-correlation-id"
	// MetadataReplyTo is the reply-to property.
	MetadataReplyTo = "amqp-reply-to"
	// MetadataType is the type property.
	MetadataType = "amqp-type"
	// MetadataAppID is the app-id property.
	MetadataAppID = "amqp-app-id"
)

// property maps one AMQP basic property to a metadata key, both ways.
type property struct {
	key string
	get func(*amqp091.Delivery) string
	set func(*amqp091.Publishing, string)
}

var properties = []property{
	{MetadataContentType, func(d *amqp091.Delivery) string { return d.ContentType }, func(p *amqp091.Publishing, v string) { p.ContentType = v }},
	{MetadataContentEncoding, func(d *amqp091.Delivery) string { return d.ContentEncoding }, func(p *amqp091.Publishing, v string) { p.ContentEncoding = v }},
	{MetadataCorrelationID, func(d *amqp091.Delivery) string { return d.CorrelationId }, func(p *amqp091.Publishing, v string) { p.CorrelationId = v }},
	{MetadataReplyTo, func(d *amqp091.Delivery) string { return d.ReplyTo }, func(p *amqp091.Publishing, v string) { p.ReplyTo = v }},
	{MetadataType, func(d *amqp091.Delivery) string { return d.Type }, func(p *amqp091.Publishing, v string) { p.Type = v }},
	{MetadataAppID, func(d *amqp091.Delivery) string { return d.AppId }, func(p *amqp091.Publishing, v string) { p.AppId = v }},
}

// Marshaler converts Watermill messages to AMQP publishings and back. Unlike watermill-amqp's
// DefaultMarshaler it never fails on a delivery: non-string headers (x-death, integers, tables,
// arrays, timestamps, bytes) become metadata in a stable text form (see headerText), so a
// message that went through a dead-letter exchange still reaches the handler. It satisfies
// watermill-amqp's Marshaler, so a plain watermill-amqp publisher or subscriber can use it too.
type Marshaler struct {
	// UUIDHeader is the header carrying the Watermill message UUID (also sent as the message-id
	// property). Default: watermill-amqp's "_watermill_message_uuid", for interoperability.
	UUIDHeader string
	// Transient publishes non-persistent messages (lost on broker restart). Default false.
	Transient bool
}

var _ wamqp.Marshaler = Marshaler{}

func (m Marshaler) uuidHeader() string {
	if m.UUIDHeader != "" {
		return m.UUIDHeader
	}
	return wamqp.DefaultMessageUUIDHeaderKey
}

// Marshal returns the publishing for msg: payload as body, metadata as string headers (except
// the delivery-only keys above and the broker-owned x-death, x-first-death-*, x-last-death-*
// and x-delivery-count, which a client must not set), UUID in header and message-id.
func (m Marshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	p := amqp091.Publishing{
		Body:      msg.Payload,
		Headers:   make(amqp091.Table, len(msg.Metadata)+1),
		MessageId: msg.UUID,
		Timestamp: time.Now().UTC(),
	}
	if !m.Transient {
		p.DeliveryMode = amqp091.Persistent
	}
	for k, v := range msg.Metadata {
		if deliveryOnly(k) || BrokerOwned(k) {
			continue
		}
		p.Headers[k] = v
	}
	for _, prop := range properties {
		if v := msg.Metadata.Get(prop.key); v != "" {
			prop.set(&p, v)
		}
	}
	p.Headers[m.uuidHeader()] = msg.UUID
	return p, nil
}

// Unmarshal returns the message of d; its error is always nil. The UUID comes from the UUID
// header, else the message-id property, else it is empty (a producer that sets neither gives
// no stable identity to deduplicate on).
func (m Marshaler) Unmarshal(d amqp091.Delivery) (*message.Message, error) {
	return m.unmarshal(d, originalKey(d)), nil
}

// unmarshal is Unmarshal with the original routing key already known: the subscriber, which
// knows its queue, reads it once with the rest of the delivery's history (decodeDelivery).
func (m Marshaler) unmarshal(d amqp091.Delivery, key string) *message.Message {
	uuid := d.MessageId
	if v, ok := d.Headers[m.uuidHeader()]; ok {
		uuid = headerText(v)
	}
	msg := message.NewMessage(uuid, d.Body)
	md := make(message.Metadata, len(d.Headers)+4)
	for k, v := range d.Headers {
		if k != m.uuidHeader() {
			md[k] = headerText(v)
		}
	}
	for _, prop := range properties {
		if v := prop.get(&d); v != "" {
			md[prop.key] = v
		}
	}
	md[MetadataRoutingKey] = key
	md[MetadataDeliveryRoutingKey] = d.RoutingKey
	md[MetadataExchange] = d.Exchange
	if d.Redelivered {
		md[MetadataRedelivered] = "true"
	}
	msg.Metadata = md
	return msg
}

// originalKey is the routing key the message was first published with, for a delivery from an
// unknown queue (a Marshaler used on its own): as originalKeyFor, with the queue named by
// x-first-death-queue. The subscriber, which knows its queue, uses originalKeyFor.
func originalKey(d amqp091.Delivery) string {
	q, _ := d.Headers[headerFirstQueue].(string)
	n := readNative(d.Headers, q)
	return originalKeyFor(d, n, q != "" && n.own)
}

// originalKeyFor is the original routing key of d given its history n for its work queue: the
// millrace-original-key header of a copy millrace published (own: d came back from one of
// millrace's retry tiers; on any other delivery the header is the producer's), else the first routing key of the
// work queue's oldest x-death entry (chosen by time, not by array position), else the
// delivery's own key. It depends on no entry of another queue, so foreign history cannot move
// it, and it stays the same on every attempt.
func originalKeyFor(d amqp091.Delivery, n native, own bool) string {
	if v, ok := d.Headers[millrace.HeaderOriginalKey].(string); ok && v != "" && own {
		return v
	}
	if n.originalKey != "" {
		return n.originalKey
	}
	return d.RoutingKey
}

func deliveryOnly(key string) bool {
	switch key {
	case MetadataRoutingKey, MetadataDeliveryRoutingKey, MetadataExchange, MetadataRedelivered:
		return true
	}
	for _, p := range properties {
		if p.key == key {
			return true
		}
	}
	return false
}

// BrokerOwned reports whether key is a header RabbitMQ writes when it dead-letters a message
// (x-death, x-first-death-*, x-last-death-*, x-delivery-count): a client must not set it on a
// work or retry queue, where RabbitMQ 3.x would act on it.
func BrokerOwned(key string) bool {
	return key == headerXDeath || key == headerDeliveryCount ||
		strings.HasPrefix(key, "x-first-death-") || strings.HasPrefix(key, "x-last-death-")
}
