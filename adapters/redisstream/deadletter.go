package redisstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/redisretry"
)

// ErrNotOwner is wrapped by DeadLetter when the delivery it was given no longer owns its entry:
// another consumer claimed it (this one overran its budget) or it was acknowledged meanwhile.
// Nothing is written, and the error makes the router nack rather than ack, so the new owner's
// delivery is left alone.
var ErrNotOwner = errors.New("redisstream: entry is no longer pending for this delivery")

// DeadLetter appends the dead letter to the dead-letter stream of rec.OriginalTopic: the
// original entry's fields byte for byte, in the order Redis keeps them, repeated names included
// (for a malformed or foreign entry too), then rec.Fields() as top-level fields, sorted by name
// (wire.DeadLetterFields). An original field whose name starts with deadletter.KeyPrefix is
// written under deadletter.EscapeKey of its name, so it never overwrites or forges a record
// field. A message that this adapter's subscriber did not deliver is written from the record:
// its Native fields exactly when it has some (a typed field is refused), else its payload and
// metadata in watermill-redisstream's layout. For a message delivered by this adapter the XADD and the XACK of the
// original run in one Lua script, the XACK only after the XADD succeeded, and only if this
// delivery still owns the entry (same consumer, same delivery count; otherwise nothing is
// written and the error wraps ErrNotOwner). On error the original stays pending and is
// recovered after its reclaim threshold.
//
// An entry with more than maxScriptValues/2 fields (Lua cannot unpack that many arguments) is
// dead-lettered in three steps instead: an ownership check, a plain XADD, then, only if the XADD
// succeeded, the XACK with a second ownership check. The ordering rule holds (no XACK without a
// written dead letter) but the steps are not atomic: if another consumer claims the entry in
// between, it may be dead-lettered twice.
//
// A failure that says the command did not run (redisretry.NotRun: a transient server reply
// such as CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN, READONLY or, on a cluster client, a
// redirection; or a connection that could not be opened) is tried again, with pauses from 50 ms
// doubling up to 1 s, for up to Config.ProcessingBudget. The script is owner-checked, so a run
// after one that did run (go-redis's own retry after a lost reply) writes nothing: the dead
// letter is written once, and the call then reports ErrNotOwner. The plain XADD of the other
// paths is not owner-checked: it is sent with go-redis's retries off for it (redisretry.Once)
// and again only when no try ran, so a lost connection with it on the wire is returned (the
// original stays pending and is dead-lettered again after its reclaim threshold: at worst a
// second dead letter of the same entry, never a lost one). The original is acknowledged only
// with its dead letter written, so a write that still fails leaves it pending as above.
//
// In a Redis Cluster the dead-letter stream must hash to the stream's slot: give the stream a
// {hash tag} (the default "<stream>.dlq" then keeps it) or set Config.DeadLetterStream.
func (a *Adapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	d, ok := deliveryFrom(msg)
	stream := rec.OriginalTopic
	if stream == "" && ok {
		stream = d.stream
	}
	dlq := a.DeadLetterTopic(stream)
	if ok {
		if err := a.deadLetterOwned(ctx, d, dlq, wire.DeadLetterFields(d.fields, rec)); err != nil {
			return fmt.Errorf("redisstream: dead-letter %s %s to %s: %w", d.stream, d.id, dlq, err)
		}
		a.stats.deadLettered.Add(1)
		return nil
	}
	// Not one of ours: no entry to copy or acknowledge; write the record's content.
	original, err := wire.RecordFields(rec)
	if err != nil {
		return fmt.Errorf("redisstream: dead-letter to %s: %w", dlq, err)
	}
	if err := a.xadd(ctx, "dead-letter XADD", dlq, 0, wire.DeadLetterFields(original, rec)); err != nil {
		return fmt.Errorf("redisstream: dead-letter to %s: %w", dlq, err)
	}
	a.stats.deadLettered.Add(1)
	return nil
}

// deadLetterOwned writes fields to dlq and acknowledges the delivery's entry, if it still owns it.
func (a *Adapter) deadLetterOwned(ctx context.Context, d *delivery, dlq string, fields []string) error {
	owner := []any{d.group, d.id, d.consumer, d.count}
	if len(fields) <= maxScriptValues {
		keys, args := []string{d.stream, dlq, a.retryKey(d.stream), a.traceKey(d.stream)}, append(owner, wire.Args(fields)...)
		var res any
		err := a.retryTransient(ctx, "dead-letter script", a.cfg.ProcessingBudget, a.notRun, func() (err error) {
			res, err = a.scripts.deadLetter.Run(ctx, a.client, keys, args...).Result()
			return err
		})
		if err != nil {
			return err
		}
		if n, isInt := res.(int64); isInt && n == 0 {
			return ErrNotOwner
		}
		return nil
	}
	// Too wide for one script: check, write, then acknowledge only after the write succeeded.
	if n, err := a.runOwned(ctx, a.scripts.owns, []string{d.stream}, owner); err != nil {
		return err
	} else if n == 0 {
		return ErrNotOwner
	}
	if err := a.xadd(ctx, "dead-letter XADD", dlq, 0, fields); err != nil {
		return err
	}
	if n, err := a.runOwned(ctx, a.scripts.ackOwned, []string{d.stream, a.retryKey(d.stream), a.traceKey(d.stream)}, owner); err != nil {
		return err
	} else if n == 0 {
		return ErrNotOwner
	}
	return nil
}

// runOwned runs an owner-checked script that answers 1 or 0, trying it again while a try did
// not run (redisretry.NotRun; a repeat of one that ran is harmless: see DeadLetter).
func (a *Adapter) runOwned(ctx context.Context, sc *redis.Script, keys []string, owner []any) (n int, err error) {
	err = a.retryTransient(ctx, "dead-letter script", a.cfg.ProcessingBudget, a.notRun, func() (err error) {
		n, err = sc.Run(ctx, a.client, keys, owner...).Int()
		return err
	})
	return n, err
}

// xadd appends one entry to stream (trimmed to about maxLen entries when maxLen > 0), sent with
// go-redis's own retries off for it (redisretry.Once) and tried again for up to
// Config.ProcessingBudget while no try ran (redisretry.NotRun: a reply such as CLUSTERDOWN, a
// refused dial). A connection lost with the XADD on it leaves unknown whether it was appended:
// that error is returned, and nothing sends it again.
func (a *Adapter) xadd(ctx context.Context, op, stream string, maxLen int64, fields []string) error {
	return a.retryTransient(ctx, op, a.cfg.ProcessingBudget, a.notRun, func() error {
		cmd := xaddCmd(ctx, stream, maxLen, fields)
		_ = a.client.Process(ctx, redisretry.Once(cmd))
		return cmd.Err()
	})
}
