package redisstream

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ackKey names one consumer group of one stream.
type ackKey struct{ stream, group string }

// acker batches XACKs: message.Ack only records the entry ID, and one goroutine sends all the
// IDs recorded so far in one pipeline (one XACK per stream). A batch smaller than ackBatch
// lingers up to ackLinger for company, and while a flush is on the wire the next acks
// accumulate, so the batch grows with the load; an ack waits at most ackLinger plus one flush.
//
// An ack recorded but not yet flushed when the process dies leaves its entry pending: it is
// reclaimed and handled again (at-least-once, as with any Redis consumer).
type acker struct {
	client redis.UniversalClient
	log    *slog.Logger
	stats  *counters

	mu      sync.Mutex
	pending map[ackKey][]string
	n       int           // IDs in pending
	wake    chan struct{} // a token when acks are recorded
	full    chan struct{} // a token when pending reaches ackBatch
}

const (
	ackRetryPause = 100 * time.Millisecond
	ackBatch      = 256
	ackLinger     = 500 * time.Microsecond
)

func newAcker(client redis.UniversalClient, log *slog.Logger) *acker {
	return &acker{client: client, log: log, pending: map[ackKey][]string{},
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1)}
}

// add records id for the next flush.
func (k *acker) add(key ackKey, id string) {
	k.mu.Lock()
	k.pending[key] = append(k.pending[key], id)
	k.n++
	full := k.n == ackBatch
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
	if full {
		select {
		case k.full <- struct{}{}:
		default:
		}
	}
}

// run flushes whenever acks are recorded, until closing; then it flushes one last time.
func (k *acker) run(closing <-chan struct{}) {
	for {
		select {
		case <-k.wake:
			k.linger(closing)
			if !k.flush(context.Background(), true) {
				select { // Redis is failing: do not spin
				case <-time.After(ackRetryPause):
				case <-closing:
				}
			}
		case <-closing:
			k.flush(context.Background(), false)
			return
		}
	}
}

// linger waits up to ackLinger for the batch to fill: at high rates one XACK then carries many
// IDs instead of a few, which saves a round trip and two system calls per flush.
func (k *acker) linger(closing <-chan struct{}) {
	k.mu.Lock()
	n := k.n
	k.mu.Unlock()
	if n >= ackBatch {
		return
	}
	t := time.NewTimer(ackLinger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-k.full:
	case <-closing:
	}
}

// flush sends every recorded ack. A failed XACK's IDs are recorded again when requeue is set.
// It reports whether every XACK succeeded.
func (k *acker) flush(ctx context.Context, requeue bool) bool {
	k.mu.Lock()
	batch := k.pending
	if len(batch) == 0 {
		k.mu.Unlock()
		return true
	}
	k.pending = make(map[ackKey][]string, len(batch))
	k.n = 0
	select { // a batch that filled up is being flushed now
	case <-k.full:
	default:
	}
	k.mu.Unlock()

	pipe := k.client.Pipeline()
	keys := make([]ackKey, 0, len(batch))
	cmds := make([]*redis.IntCmd, 0, len(batch))
	for key, ids := range batch {
		keys = append(keys, key)
		cmds = append(cmds, pipe.XAck(ctx, key.stream, key.group, ids...))
	}
	_, _ = pipe.Exec(ctx) // errors are per command, below
	ok := true
	for i, cmd := range cmds {
		ids := batch[keys[i]]
		if err := cmd.Err(); err != nil {
			ok = false
			if k.stats != nil {
				k.stats.ackErrors.Add(1)
			}
			k.log.Error("redisstream: XACK failed; entries stay pending", slog.String("stream", keys[i].stream),
				slog.Int("entries", len(ids)), slog.Bool("retrying", requeue), slog.String("error", err.Error()))
			var reply redis.Error
			if requeue && !errors.As(err, &reply) { // a server reply (NOGROUP) will not change
				k.mu.Lock()
				k.pending[keys[i]] = append(k.pending[keys[i]], ids...)
				k.n += len(ids)
				k.mu.Unlock()
			}
			continue
		}
		if k.stats != nil {
			k.stats.acked.Add(uint64(len(ids)))
		}
	}
	if !ok && requeue {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
	return ok
}
