package redisstream

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
)

// publishChunk bounds one pipeline, so a large Publish call does not buffer everything at once.
const publishChunk = 1000

// publisher appends messages to streams with XADD, in watermill-redisstream's field layout,
// pipelined per call.
type publisher struct{ a *Adapter }

// Publish appends msgs to stream in order. On error some leading messages may be appended. A
// failure that says nothing was appended (notSent: a cluster failover's CLUSTERDOWN, TRYAGAIN,
// LOADING, or a connection that could not be opened) is tried again for up to
// Config.ProcessingBudget, for the messages not yet appended only.
func (p *publisher) Publish(stream string, msgs ...*message.Message) error {
	if p.a.isClosed() {
		return fmt.Errorf("redisstream: publish to %s: %w", stream, millrace.ErrClosed)
	}
	ctx := context.Background()
	for len(msgs) > 0 {
		n := min(len(msgs), publishChunk)
		if err := p.publish(ctx, stream, msgs[:n]); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// publish appends msgs in one pipeline. When the XADDs from some index on all failed in a way
// that says they were not sent (notSent: the server appended none of them), those are sent
// again, in order, for up to Config.ProcessingBudget; the ones before were appended once, so
// nothing is duplicated or reordered. Any other failure is returned.
func (p *publisher) publish(ctx context.Context, stream string, msgs []*message.Message) error {
	args := make([]*redis.XAddArgs, len(msgs))
	for i, m := range msgs {
		fields, err := wire.Marshal(m)
		if err != nil {
			return fmt.Errorf("redisstream: publish to %s: %w", stream, err)
		}
		args[i] = &redis.XAddArgs{Stream: stream, Values: fields, MaxLen: p.a.cfg.MaxLen, Approx: p.a.cfg.MaxLen > 0}
	}
	final := false // a failure that must not be sent again
	retry := func(err error) bool { return !final && notSent(err) }
	err := p.a.retryTransient(ctx, "publish", p.a.cfg.ProcessingBudget, retry, func() error {
		pipe := p.a.client.Pipeline()
		cmds := make([]*redis.StringCmd, len(args))
		for i, a := range args {
			cmds[i] = pipe.XAdd(ctx, a)
		}
		_, _ = pipe.Exec(ctx) // errors are per command, below
		for i, c := range cmds {
			if c.Err() == nil {
				continue
			}
			for _, rest := range cmds[i:] {
				if !notSent(rest.Err()) { // not known to be unwritten: do not send again
					final = true
					return c.Err()
				}
			}
			args = args[i:]
			return c.Err()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstream: publish to %s: %w", stream, err)
	}
	return nil
}

// Close does nothing: the adapter owns the connection.
func (p *publisher) Close() error { return nil }

// PublishNative appends one entry to stream with exactly fields, in their order (repeated names
// included): the Native content of a dead letter read by DeadLetterStore, re-published as
// the entry first arrived. It refuses, with an error wrapping deadletter.ErrNotReplayable,
// content a Redis entry cannot hold exactly: no field at all, or a typed field (another
// broker's header). Config.MaxLen applies, and transient replies are tried again, as for Publish.
func (a *Adapter) PublishNative(ctx context.Context, stream string, fields []deadletter.Field) error {
	if a.isClosed() {
		return fmt.Errorf("redisstream: publish to %s: %w", stream, millrace.ErrClosed)
	}
	f, err := wire.FromNative(fields)
	if err != nil {
		return fmt.Errorf("redisstream: publish to %s: %w: %w", stream, deadletter.ErrNotReplayable, err)
	}
	args := &redis.XAddArgs{Stream: stream, Values: f, MaxLen: a.cfg.MaxLen, Approx: a.cfg.MaxLen > 0}
	if err := a.xadd(ctx, "publish", args); err != nil {
		return fmt.Errorf("redisstream: publish to %s: %w", stream, err)
	}
	return nil
}
