package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
)

var _ millrace.BacklogReporter = (*Adapter)(nil)

// Backlog reports topic's durable consumer (Config.Durable on the stream Config.StreamName
// names) and its dead-letter stream, in two JetStream API requests (consumer info, stream
// info), within ctx (JetStream's default request timeout, 5 s, when ctx has no deadline):
//
//   - Waiting: the consumer's NumPending, the stream's messages matching its subject that
//     JetStream has not delivered to it yet.
//   - InFlight: the consumer's NumAckPending, messages delivered and not yet acknowledged or
//     terminated: held by handlers, buffered in a pull batch, or nacked with a delay for a
//     retry (NakWithDelay keeps a message pending until its redelivery).
//   - RetriesWaiting: Unknown. A retry is a NakWithDelay of the original, counted in InFlight;
//     JetStream does not say how many pending messages wait for their delay.
//   - DeadLetters: the messages of the dead-letter stream (subject topic + ".dlq"), 0 while it
//     does not exist (it is created by Provision, or by the first dead letter).
//
// A consumer that does not exist (the topic not provisioned) is an error.
func (a *Adapter) Backlog(ctx context.Context, topic string) (millrace.Backlog, error) {
	if err := a.checkTopic(topic); err != nil {
		return millrace.Backlog{}, err
	}
	stream := a.cfg.StreamName(topic)
	cons, err := a.js.Consumer(ctx, stream, a.cfg.Durable)
	if err != nil {
		return millrace.Backlog{}, fmt.Errorf("nats: backlog of %q: consumer %s on stream %s: %w", topic, a.cfg.Durable, stream, err)
	}
	ci := cons.CachedInfo()
	b := millrace.Backlog{RetriesWaiting: millrace.Unknown}
	b.Waiting = backlogCount(ci.NumPending)
	b.InFlight = int64(max(ci.NumAckPending, 0))
	dlq := a.cfg.StreamName(a.DeadLetterTopic(topic))
	s, err := a.js.Stream(ctx, dlq)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return millrace.Backlog{}, fmt.Errorf("nats: backlog of %q: dead-letter stream %s: %w", topic, dlq, err)
	default:
		b.DeadLetters = backlogCount(s.CachedInfo().State.Msgs)
	}
	return b, nil
}

func backlogCount(n uint64) int64 {
	if n > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(n)
}
