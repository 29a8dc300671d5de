package nats

import (
	"context"
	"errors"
	"testing"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
)

// newTestStore returns a store on a fresh dead-letter stream, deleted when the test ends.
func newTestStore(t *testing.T) *DeadLetterStore {
	t.Helper()
	a := newTestAdapter(t, testConfig())
	topic := uniqueSubject(t)
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	dlq := a.DeadLetterTopic(topic)
	s, err := NewDeadLetterStore(a.JetStream(), dlq, a.Config().StreamName(dlq))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDeadLetterStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) deadletter.Store { return newTestStore(t) }, storetest.Options{
		NoDedup: true,
		// Native content is kept when a header has several values (a Watermill message
		// cannot hold it); headers are untyped and come back sorted by name.
		Native: []deadletter.Field{
			{Name: "_watermill_message_uuid", Value: []byte("u-1")},
			{Name: "x-trace", Value: []byte("a")},
			{Name: "x-trace", Value: []byte("\xff\x00b")},
		},
	})
}

// TestDeadLetterStoreMissingStream: a store on a stream that does not exist says so in the
// words every broker uses.
func TestDeadLetterStoreMissingStream(t *testing.T) {
	a := newTestAdapter(t, testConfig())
	dlq := a.DeadLetterTopic(uniqueSubject(t))
	s, err := NewDeadLetterStore(a.JetStream(), dlq, a.Config().StreamName(dlq))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Count(context.Background(), deadletter.Filter{})
	var nf *deadletter.DestinationNotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, deadletter.ErrDestinationNotFound) {
		t.Fatalf("Count on a missing stream: %v, want a DestinationNotFoundError", err)
	}
}
