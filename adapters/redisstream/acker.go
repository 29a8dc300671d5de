package redisstream

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisretry"
)

// ackKey names one consumer group of one stream.
type ackKey struct{ stream, group string }

// acker batches XACKs: message.Ack only records the entry ID, and one goroutine sends all the
// IDs recorded so far in one pipeline (one XACK per stream). A batch smaller than ackBatch
// lingers up to ackLinger for company, and while a flush is on the wire the next acks
// accumulate, so the batch grows with the load; an ack waits at most ackLinger plus one flush.
//
// An XACK that fails transiently (redisretry.Transient: CLUSTERDOWN, TRYAGAIN, LOADING,
// MASTERDOWN, READONLY, a redirection on a cluster client, a refused or lost connection) keeps
// its IDs: they are sent again, with the next acks, after a pause that doubles from
// ackRetryPause up to ackMaxPause, for as long as the adapter is open, so a success whose ack
// met a cluster failover is acknowledged once the cluster is back. XACK is idempotent, so a
// resend after a lost reply is harmless. The IDs kept are those of the messages handled while
// the acks fail: while the reads fail the same way (the cluster is down, the connection is
// lost) nothing new is handled, so that is about the Window of each subscription. A hard cap
// holds whatever happens (an XACK that fails while the reads succeed: a NOPERM-like transient
// reply for XACK only): at most ackKeptMax IDs (65536: a few MiB) are kept after failures;
// the IDs past it are dropped, their entries stay pending and are handled again after MinIdle
// (one Error line says so the first time in a failing spell). Only a final reply (NOGROUP: the
// group was deleted) drops its IDs otherwise.
//
// The failures are logged at Error at most once per ackLogEvery (10 s), with the count of the
// XACKs that failed, and of the entries kept and dropped, since the previous line: a cluster
// that stays down does not log a line per flush.
//
// While IDs are recorded and not yet acknowledged the reclaimer of this adapter does not hand
// their entries out again (unsettled): a success is not re-judged, as a delivery past
// MaxAttempts would be (dead-lettered as exhausted without calling the handler).
//
// An ack recorded but not yet flushed when the process dies, or still failing when Close gives
// up (after ackCloseWait), leaves its entry pending: it is reclaimed and handled again
// (at-least-once, as with any Redis consumer).
type acker struct {
	client redis.UniversalClient
	log    *slog.Logger
	stats  *counters

	mu      sync.Mutex
	pending map[ackKey][]any
	n       int                         // IDs in pending
	sending map[uint64]map[ackKey][]any // the batches on the wire, by flush number
	flushes uint64                      // flushes started
	wake    chan struct{}               // a token when acks are recorded
	full    chan struct{}               // a token when pending reaches ackBatch

	keptMax int // the most IDs kept after failures (ackKeptMax)
	// The failure log, rate-limited (ackLogEvery): counts since the last line.
	failLogged          time.Time
	failXacks, failKept int
	failDropped         int
	failErr             error
	failStream          string
	capLogged           bool // the cap's Error line was logged in this failing spell
}

const (
	ackRetryPause = 100 * time.Millisecond
	ackMaxPause   = time.Second
	ackBatch      = 256
	ackLinger     = 500 * time.Microsecond
	// ackCloseWait bounds how long Close keeps trying to send acks that fail transiently.
	ackCloseWait = 5 * time.Second
	// ackKeptMax caps the IDs kept after failed XACKs (an ID is about 15-40 bytes plus its
	// string header: 64 Ki of them take a few MiB).
	ackKeptMax = 1 << 16
	// ackLogEvery is the least time between two lines about failed XACKs.
	ackLogEvery = 10 * time.Second
)

func newAcker(client redis.UniversalClient, log *slog.Logger) *acker {
	return &acker{client: client, log: log, pending: map[ackKey][]any{},
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), keptMax: ackKeptMax}
}

// add records id for the next flush: an entry ID, always a string, boxed (as a reply held it:
// see delivery.ackID). unsettled reads the IDs back as strings and skips anything else, so a
// non-string here would be acknowledged and yet not protected from the reclaimer.
func (k *acker) add(key ackKey, id any) {
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

// unsettled returns the IDs of key's entries whose ack is recorded (waiting, on the wire, or
// kept after a transient failure) and not yet confirmed by Redis; nil when there are none.
func (k *acker) unsettled(key ackKey) map[string]struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ids map[string]struct{}
	collect := func(batch map[ackKey][]any) {
		for _, id := range batch[key] {
			if ids == nil {
				ids = map[string]struct{}{}
			}
			if s, ok := id.(string); ok {
				ids[s] = struct{}{}
			}
		}
	}
	collect(k.pending)
	for _, b := range k.sending {
		collect(b)
	}
	return ids
}

// run flushes whenever acks are recorded, until closing; then it flushes what is left (drain).
func (k *acker) run(closing <-chan struct{}) {
	pause := ackRetryPause
	for {
		select {
		case <-k.wake:
			k.linger(closing)
			if k.flush(context.Background(), true) {
				pause = ackRetryPause
				continue
			}
			select { // Redis is failing: do not spin
			case <-time.After(pause):
			case <-closing:
			}
			pause = min(2*pause, ackMaxPause)
		case <-closing:
			k.drain(ackCloseWait)
			return
		}
	}
}

// drain flushes until nothing is left or limit has passed, then drops what is left, saying so.
func (k *acker) drain(limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	pause := ackRetryPause
	for !k.flush(ctx, true) {
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		pause = min(2*pause, ackMaxPause)
	}
	k.mu.Lock()
	n := k.n
	k.pending, k.n = map[ackKey][]any{}, 0
	k.mu.Unlock()
	if n > 0 {
		k.log.Error("redisstream: closing with acknowledgements Redis did not take; their entries stay pending and are handled again",
			slog.Int("entries", n), slog.Duration("tried_for", limit))
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

// flush sends every recorded ack. When requeue is set, the IDs of an XACK that failed
// transiently (redisretry.Transient) are recorded again for the next flush, up to keptMax; any
// other failure drops them (they stay pending in Redis). Failures are logged at most once per
// ackLogEvery. It reports whether every XACK succeeded.
func (k *acker) flush(ctx context.Context, requeue bool) bool {
	k.mu.Lock()
	batch := k.pending
	if len(batch) == 0 {
		k.mu.Unlock()
		return true
	}
	k.pending = make(map[ackKey][]any, len(batch))
	k.n = 0
	k.flushes++
	seq := k.flushes
	if k.sending == nil {
		k.sending = map[uint64]map[ackKey][]any{}
	}
	k.sending[seq] = batch
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
		cmds = append(cmds, xack(ctx, pipe, key, ids))
	}
	_, _ = pipe.Exec(ctx) // errors are per command, below
	ok := true
	var capHit bool
	k.mu.Lock()
	for i, cmd := range cmds {
		ids := batch[keys[i]]
		err := cmd.Err()
		if err == nil {
			if k.stats != nil {
				k.stats.acked.Add(uint64(len(ids)))
			}
			continue
		}
		ok = false
		if k.stats != nil {
			k.stats.ackErrors.Add(1)
		}
		k.failXacks++
		k.failErr, k.failStream = err, keys[i].stream
		if !requeue || !redisretry.Transient(k.client, err) {
			k.failDropped += len(ids)
			continue
		}
		// Recorded again before this batch leaves sending: never unsettled-free. Past the
		// cap, the rest is dropped (the entries stay pending).
		keep := min(len(ids), max(k.keptMax-k.n, 0))
		k.pending[keys[i]] = append(k.pending[keys[i]], ids[:keep]...)
		k.n += keep
		k.failKept += keep
		if keep < len(ids) {
			k.failDropped += len(ids) - keep
			if !k.capLogged {
				k.capLogged, capHit = true, true
			}
		}
	}
	if ok {
		k.capLogged = false
	}
	delete(k.sending, seq)
	var line []any
	if !ok && time.Since(k.failLogged) >= ackLogEvery {
		line = []any{slog.Int("failed_xacks", k.failXacks), slog.Int("entries_kept", k.failKept),
			slog.Int("entries_dropped", k.failDropped), slog.String("stream", k.failStream), slog.String("error", k.failErr.Error())}
		if !k.failLogged.IsZero() {
			line = append(line, slog.Duration("since_last_line", time.Since(k.failLogged).Round(time.Millisecond)))
		}
		k.failLogged = time.Now()
		k.failXacks, k.failKept, k.failDropped, k.failErr = 0, 0, 0, nil
	}
	k.mu.Unlock()
	if capHit {
		k.log.Error("redisstream: too many acknowledgements kept after failed XACKs; the ones past the cap are dropped, their entries stay pending and are handled again after MinIdle",
			slog.Int("cap", k.keptMax))
	}
	if line != nil {
		k.log.Error("redisstream: XACK failed; entries stay pending until an XACK succeeds (kept: sent again; dropped: handled again after MinIdle)", line...)
	}
	if !ok && requeue {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
	return ok
}

// xack queues on pipe the XACK of ids (strings, boxed) in key's stream and group. It is
// go-redis's XAck with the IDs passed as they are: XAck takes strings and boxes each one again,
// one allocation per message.
func xack(ctx context.Context, pipe redis.Pipeliner, key ackKey, ids []any) *redis.IntCmd {
	args := make([]any, 0, 3+len(ids))
	args = append(args, "xack", key.stream, key.group)
	args = append(args, ids...)
	cmd := redis.NewIntCmd(ctx, args...)
	_ = pipe.Process(ctx, cmd) // queued: the error is the command's, after Exec
	return cmd
}
