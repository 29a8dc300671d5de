// Package sink sends an adapter's dead letters to a deadletter.Store (such as the PostgreSQL
// table of package pgstore), instead of or in addition to the broker's own dead-letter
// destination. It is a millrace.Adapter decorator: give the router the Sink, not the adapter.
//
// The original message is acknowledged only when every write the mode asks for succeeded: a
// store that is down makes DeadLetter fail, the router nacks, and the broker delivers the
// message again, as field report 1 requires.
//
// What the store keeps is the Record the middleware built (payload, metadata and the failure
// context) plus, when the adapter implements deadletter.NativeSource, the delivery's native
// content in Record.Native: the fields of a foreign Redis entry in order with repeated names,
// Kafka headers that repeat a name, typed AMQP headers or SQS attributes, as the adapter's own
// dead-letter store would read them. A store that keeps Native (pgstore does) shows and replays
// such a message exactly; without it, only what Payload and Metadata hold would survive.
package sink

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// Mode says where a Sink writes dead letters.
type Mode uint8

const (
	// StoreOnly writes dead letters to the store only; the broker's dead-letter destination stays
	// empty. The default.
	StoreOnly Mode = iota
	// StoreAndBroker writes to the store first, then to the broker's destination. If the broker
	// write fails the message is redelivered and dead-lettered again; stores that recognise a
	// delivery they already hold (pgstore does) keep one entry.
	StoreAndBroker
)

// Options configure a Sink. The zero value is valid.
type Options struct {
	// Mode says where dead letters go; default StoreOnly.
	Mode Mode
}

// Validate checks Mode.
func (o Options) Validate() error {
	if o.Mode != StoreOnly && o.Mode != StoreAndBroker {
		return &millrace.ConfigError{Field: "sink.Options.Mode", Value: strconv.Itoa(int(o.Mode)), Rule: "must be StoreOnly or StoreAndBroker"}
	}
	return nil
}

// Sink is adapter with DeadLetter redirected to a store. Every other method is the adapter's.
type Sink struct {
	millrace.Adapter
	store deadletter.Store
	mode  Mode
}

var (
	_ millrace.Adapter        = (*Sink)(nil)
	_ deadletter.NativeSource = (*Sink)(nil)
)

// New wraps adapter so that its dead letters go to store. Closing the Sink closes the adapter,
// not the store.
func New(adapter millrace.Adapter, store deadletter.Store, opts Options) (*Sink, error) {
	if adapter == nil {
		return nil, &millrace.ConfigError{Field: "sink.New adapter", Value: "nil", Rule: "is required"}
	}
	if store == nil {
		return nil, &millrace.ConfigError{Field: "sink.New store", Value: "nil", Rule: "is required"}
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Sink{Adapter: adapter, store: store, mode: opts.Mode}, nil
}

// NativeContent is the adapter's deadletter.NativeSource method when it has one (so a Sink
// wrapped in another decorator still gives it), else nil.
func (s *Sink) NativeContent(msg *message.Message) []deadletter.Field {
	if src, ok := s.Adapter.(deadletter.NativeSource); ok {
		return src.NativeContent(msg)
	}
	return nil
}

// Store returns the store dead letters are written to.
func (s *Sink) Store() deadletter.Store { return s.store }

// DeadLetter writes rec to the store (and, with StoreAndBroker, to the broker's destination).
// An error means the original must not be acknowledged.
//
// When the adapter is a deadletter.NativeSource and returns native content for msg (a foreign
// Redis entry, say, whose fields Payload and Metadata cannot hold), rec.Native is set to it
// before the write, whatever the mode, so the store keeps the original exactly.
func (s *Sink) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	if native := s.NativeContent(msg); native != nil {
		rec.Native = native
	}
	if _, err := s.store.Put(ctx, rec); err != nil {
		return fmt.Errorf("dead-letter store: %w", err)
	}
	if s.mode == StoreAndBroker {
		return s.Adapter.DeadLetter(ctx, msg, rec)
	}
	return nil
}
