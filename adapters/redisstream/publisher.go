package redisstream

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/redisretry"
)

// publishChunk bounds one pipeline, so a large Publish call does not buffer everything at once.
const publishChunk = 1000

// publisher appends messages to streams with XADD, in watermill-redisstream's field layout,
// pipelined per call.
type publisher struct{ a *Adapter }

// Publish appends msgs to stream in order. On error some leading messages may be appended. A
// failure that says nothing was appended (a cluster failover's CLUSTERDOWN, TRYAGAIN, LOADING,
// a redirection on a cluster client, or a connection that could not be opened) is tried again
// for up to Config.ProcessingBudget, for the messages not yet appended only. The XADDs are sent
// with go-redis's own retries off for them (whatever the client's MaxRetries): a connection
// lost with an XADD on it leaves unknown whether it was appended, and neither go-redis nor the
// adapter sends it again; Publish returns that error (a caller that publishes again may append
// the message twice: at-least-once, as with any Redis producer).
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
// that says they did not run (redisretry.NotRun of a Once command: the server appended none of
// them), those are sent again, in order, for up to Config.ProcessingBudget; the ones before
// were appended once, so nothing is duplicated or reordered. Any other failure is returned.
func (p *publisher) publish(ctx context.Context, stream string, msgs []*message.Message) error {
	fields := make([][]string, len(msgs))
	for i, m := range msgs {
		f, err := wire.Marshal(m)
		if err != nil {
			return fmt.Errorf("redisstream: publish to %s: %w", stream, err)
		}
		fields[i] = f
	}
	final := false // a failure that must not be sent again
	retry := func(err error) bool { return !final && p.a.notRun(err) }
	err := p.a.retryTransient(ctx, "publish", p.a.cfg.ProcessingBudget, retry, func() error {
		pipe := p.a.client.Pipeline()
		cmds := make([]*redis.StringCmd, len(fields))
		for i, f := range fields {
			cmds[i] = xaddCmd(ctx, stream, p.a.cfg.MaxLen, f)
			_ = pipe.Process(ctx, redisretry.Once(cmds[i]))
		}
		_, _ = pipe.Exec(ctx) // errors are per command, below
		for i, c := range cmds {
			if c.Err() == nil {
				continue
			}
			for _, rest := range cmds[i:] {
				if !p.a.notRun(rest.Err()) { // not known to be unwritten: do not send again
					final = true
					return c.Err()
				}
			}
			fields = fields[i:]
			return c.Err()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstream: publish to %s: %w", stream, err)
	}
	return nil
}

// xaddCmd is "XADD stream [MAXLEN ~ maxLen] * fields...", a command to send wrapped by
// redisretry.Once (maxLen <= 0: no trimming).
func xaddCmd(ctx context.Context, stream string, maxLen int64, fields []string) *redis.StringCmd {
	args := make([]any, 0, 6+len(fields))
	args = append(args, "xadd", stream)
	if maxLen > 0 {
		args = append(args, "maxlen", "~", maxLen)
	}
	args = append(args, "*")
	for _, f := range fields {
		args = append(args, f)
	}
	return redis.NewStringCmd(ctx, args...)
}

// Close does nothing: the adapter owns the connection.
func (p *publisher) Close() error { return nil }

// PublishNative appends one entry to stream with exactly fields, in their order (repeated names
// included): the Native content of a dead letter read by DeadLetterStore, re-published as
// the entry first arrived. It refuses, with an error wrapping deadletter.ErrNotReplayable,
// content a Redis entry cannot hold exactly: no field at all, or a typed field (another
// broker's header). Config.MaxLen applies, and a failure that says the XADD did not run is
// tried again (a lost connection is not), as for Publish.
func (a *Adapter) PublishNative(ctx context.Context, stream string, fields []deadletter.Field) error {
	if a.isClosed() {
		return fmt.Errorf("redisstream: publish to %s: %w", stream, millrace.ErrClosed)
	}
	f, err := wire.FromNative(fields)
	if err != nil {
		return fmt.Errorf("redisstream: publish to %s: %w: %w", stream, deadletter.ErrNotReplayable, err)
	}
	if err := a.xadd(ctx, "publish", stream, a.cfg.MaxLen, f); err != nil {
		return fmt.Errorf("redisstream: publish to %s: %w", stream, err)
	}
	return nil
}
