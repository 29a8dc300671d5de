package amqp

import (
	"context"
	"errors"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

// A dead letter holding the producer's own x-death cannot be put back safely (RabbitMQ 3.x acts
// on a client's x-death): PublishNative refuses it before it touches the broker, so the CLI
// keeps the record. The replay used to drop the header and delete the record.
func TestAMQPReplayRefusesProducerHistory(t *testing.T) {
	b := &urlBroker{}
	for _, rec := range []deadletter.Record{
		{Metadata: map[string]string{"x-death": "[...]"}},
		{Native: []deadletter.Field{{Name: "x-first-death-queue", Type: "S", Value: []byte("\x00\x00\x00\x01q")}}},
	} {
		if err := b.PublishNative(context.Background(), "t", rec); !errors.Is(err, deadletter.ErrNotReplayable) {
			t.Errorf("record %+v: err = %v, want ErrNotReplayable", rec, err)
		}
	}
}
