package redisstream

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream/wire"
)

// errorPause is how long a subscription waits after a failed Redis call before trying again.
const errorPause = 250 * time.Millisecond

// subscription is one consumer of the group on one stream. One goroutine alternates between the
// reclaimer (due pending entries) and XREADGROUP (new entries), and never has more than
// Config.Window messages in flight: reads and claims ask for at most the free part of the window,
// so an entry is claimed only when it can be handed out at once (a claimed entry that waited in
// memory would age towards another consumer's reclaim threshold).
//
// The message channel holds a whole window: the loop hands out a read's entries without waiting
// for the consumer to take each one (a goroutine switch per message, often to the other core).
// What the consumer has not taken when the loop stops is given back (drain, giveBack).
type subscription struct {
	a        *Adapter
	stream   string
	consumer string
	key      ackKey
	out      chan *message.Message // buffered: Config.Window
	// routerSettles: the consumer is millrace's router, which tells each message's verdict to
	// its context (millrace.RouterSettles, deliveryCtx.Settle), so no goroutine per message
	// waits for it (await).
	routerSettles bool
	// deadLetters: the stream is a dead-letter stream (DeadLetterSubscriber): its record fields
	// are read into the metadata (decodeDeadLetter). Never set for a work stream.
	deadLetters bool

	ctx    context.Context // cancelled by stop: ends the loop
	cancel context.CancelFunc
	// msgCtx is the Subscribe context, parent of the messages' contexts (withDelivery): those
	// keep its values but are never cancelled, so that handlers in flight finish after a
	// subscriber Close (the router waits for them up to its CloseTimeout; the router budget
	// bounds each). Having no Done channel also spares every per-message context derived from
	// them (the budget deadline) the registration with one shared parent, a contended lock at
	// high rates.
	msgCtx context.Context

	inflight atomic.Int64
	freed    chan struct{} // a token after each ack or nack
	loopDone chan struct{}

	// Reclaimer state, used only by the loop goroutine.
	nextTick    time.Time // when due retries are looked up next
	moreDue     bool      // the last lookup took a full batch: look again without waiting
	nextRecover time.Time // when the next recovery pass starts
	moreStale   bool      // a recovery pass is under way
	cursor      string    // XPENDING start of the next recovery round: "-" or "(" + last ID seen
	unsent      []sent    // entries read or claimed but not handed out when the loop stopped
	nextSweep   time.Time // when the next step of the trace hash sweep runs (see sweepTraces)
	sweepCursor string    // HSCAN cursor of the sweep under way; "" or "0" when none is
}

// sent is an entry delivered to this consumer, with its delivery count and the stored span
// context of its failed attempt, if any (see trace.go).
type sent struct {
	id    string
	count int64
	trace string
}

func newSubscription(parent context.Context, a *Adapter, stream string, deadLetters bool) *subscription {
	s := &subscription{
		routerSettles: millrace.RouterSettles(parent),
		a:             a,
		stream:        stream,
		deadLetters:   deadLetters,
		consumer:      a.consumerName(),
		key:           ackKey{stream: stream, group: a.cfg.Group},
		out:           make(chan *message.Message, a.cfg.Window),
		freed:         make(chan struct{}, 1),
		loopDone:      make(chan struct{}),
		cursor:        "-",
	}
	s.ctx, s.cancel = context.WithCancel(parent)
	s.msgCtx = parent
	return s
}

// stopAll ends the loops of subs and waits until their message channels are closed. It stops
// them all at once: each may be waiting out a blocking read, so cancelling them one after
// another would add those waits up (3.6 s for 20 subscriptions).
func stopAll(subs []*subscription) {
	for _, s := range subs {
		s.cancel()
	}
	for _, s := range subs {
		<-s.loopDone
	}
}

// run is the subscription's goroutine.
func (s *subscription) run() {
	defer s.a.bg.Done()
	defer s.a.unregister(s)
	s.loop()
	s.drain()
	close(s.out)
	s.giveBack()
	close(s.loopDone)
	s.cleanup()
}

func (s *subscription) loop() {
	cfg := &s.a.cfg
	for s.ctx.Err() == nil {
		free := cfg.Window - int(s.inflight.Load())
		if free <= 0 {
			select {
			case <-s.freed:
			case <-s.ctx.Done():
			}
			continue
		}
		now := time.Now()
		if !now.Before(s.nextTick) {
			s.nextTick = now.Add(cfg.ReclaimInterval)
			s.moreDue = true
		}
		if !now.Before(s.nextRecover) {
			s.nextRecover = now.Add(cfg.RecoverInterval)
			s.moreStale, s.cursor = true, "-"
		}
		if !s.deadLetters && !now.Before(s.nextSweep) {
			s.sweepTraces(now)
		}
		if s.moreDue {
			if free -= s.claimDue(free); free <= 0 {
				continue
			}
		}
		if s.moreStale {
			if free -= s.recoverStale(free); free <= 0 {
				continue
			}
		}
		block := time.Duration(-1) // more to claim: only look for new entries, do not wait
		if !s.moreDue && !s.moreStale {
			block = max(min(cfg.ReadBlock, time.Until(s.nextTick)), time.Millisecond)
		}
		s.read(free, block)
	}
}

// read hands out up to n new entries, waiting up to block for the first one (never longer than
// Adapter.maxBlock; a negative block does not wait).
//
// XREADGROUP goes through Do and wire.ParseRead, not go-redis's XReadGroup: that one returns each
// entry's fields as a map, which loses their order and every repeated name, so a foreign entry
// could not be dead-lettered as it arrived.
func (s *subscription) read(n int, block time.Duration) {
	args := make([]any, 0, 12)
	args = append(args, "XREADGROUP", "GROUP", s.a.cfg.Group, s.consumer, "COUNT", n)
	if block >= 0 {
		args = append(args, "BLOCK", min(block, s.a.maxBlock).Milliseconds())
	}
	args = append(args, "STREAMS", s.stream, ">")
	// Not s.ctx: entries Redis has handed over must reach the loop, which gives them back
	// if it is stopping (see giveBack).
	res, err := s.a.client.Do(context.WithoutCancel(s.ctx), args...).Result()
	if errors.Is(err, redis.Nil) {
		return
	}
	if err != nil {
		s.failed("XREADGROUP", err)
		return
	}
	entries, err := wire.ParseRead(res)
	if err != nil {
		s.failed("XREADGROUP", err)
		return
	}
	s.a.stats.read.Add(uint64(len(entries)))
	for i, e := range entries {
		if !s.deliver(e, 1, "") {
			for _, rest := range entries[i+1:] {
				s.unsent = append(s.unsent, sent{id: rest.ID, count: 1})
			}
			return
		}
	}
}

// failed logs a failed Redis call, recreates a vanished group and pauses before the next try.
func (s *subscription) failed(op string, err error) {
	if s.ctx.Err() != nil {
		return
	}
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		err = s.a.ensureGroup(s.ctx, s.stream)
		if err == nil {
			return
		}
	}
	s.a.cfg.Logger.Error("redisstream: "+op+" failed", slog.String("stream", s.stream),
		slog.String("consumer", s.consumer), slog.String("error", err.Error()))
	select {
	case <-time.After(errorPause):
	case <-s.ctx.Done():
	}
}

// deliver hands out one entry with its delivery count and the stored span context of its
// failed attempt ("" for none; see trace.go), and reports false when the loop is stopping (the
// entry is then remembered for giveBack).
func (s *subscription) deliver(e wire.Entry, count int64, trace string) bool {
	var msg *message.Message
	var err error
	if s.deadLetters {
		msg, err = decodeDeadLetter(e.ID, e.Fields)
	} else {
		msg, err = decode(e.ID, e.Fields)
	}
	if err == nil && trace != "" && !applyTrace(msg.Metadata, trace) {
		s.a.cfg.Logger.Warn("redisstream: dropped a stored attempt span context that is not one this adapter writes",
			slog.String("stream", s.stream), slog.String("entry", e.ID), slog.Int("bytes", len(trace)))
	}
	dc := withDelivery(s.msgCtx, delivery{
		stream: s.stream, group: s.a.cfg.Group, consumer: s.consumer,
		id: e.ID, idArg: e.IDArg, count: count, fields: e.Fields, added: addedAt(e.ID),
	})
	dc.trace = trace
	if s.routerSettles {
		dc.sub, dc.msg = s, msg
	}
	var ctx context.Context = dc
	if err != nil {
		s.a.stats.malformed.Add(1)
		ctx = millrace.WithDecodeError(ctx, err)
	}
	msg.SetContext(ctx)
	s.inflight.Add(1)
	select {
	case s.out <- msg:
	case <-s.ctx.Done():
		s.inflight.Add(-1)
		s.unsent = append(s.unsent, sent{id: e.ID, count: count, trace: trace})
		return false
	}
	if !s.routerSettles {
		go s.await(msg, dc.d.ackID())
	}
	return true
}

// settled takes the verdict on the entry id (delivery.ackID) from the router (see
// deliveryCtx.Settle): as await does, an ack goes to the acker and a nack leaves the entry
// pending.
func (s *subscription) settled(id any, acked bool) {
	if acked {
		s.a.acks.add(s.key, id)
	}
	s.free()
}

// free gives a message's place in the window back and wakes the loop.
func (s *subscription) free() {
	s.inflight.Add(-1)
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// drain takes back, once the loop stopped, the messages the consumer has not taken from the
// channel, for giveBack: as an entry the loop could not hand out, each is made due again at
// once for the group, at no cost of an attempt. A message is nacked (nothing has it, so nothing
// else can ack it), which ends its await; with the router settling, drain frees its place itself.
func (s *subscription) drain() {
	for {
		select {
		case msg := <-s.out:
			dc := deliveryCtxOf(msg)
			s.unsent = append(s.unsent, sent{id: dc.d.id, count: dc.d.count, trace: dc.trace})
			msg.Nack()
			if s.routerSettles && dc.told.CompareAndSwap(false, true) {
				s.free()
			}
		default:
			return
		}
	}
}

// await records the ack of msg (entry id, as delivery.ackID) for the acker, or leaves the entry
// pending on nack.
func (s *subscription) await(msg *message.Message, id any) {
	select {
	case <-msg.Acked():
		s.a.acks.add(s.key, id)
	case <-msg.Nacked():
		// Nothing to do in Redis: the entry stays pending. Either ScheduleRetry already set its
		// due time, or (a failure that scheduled nothing) it is due after its reclaim threshold.
	case <-s.a.closing:
	}
	s.free()
}

// giveBack makes the entries this consumer took but never handed out due at once for every
// consumer of the group, with their delivery count lowered by one: the claim that delivers them
// again raises it back, so the interruption costs no attempt.
func (s *subscription) giveBack() {
	if len(s.unsent) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
	defer cancel()
	pipe := s.a.client.TxPipeline()
	due := make([]redis.Z, 0, len(s.unsent))
	var traces []any
	for _, u := range s.unsent {
		pipe.Do(ctx, "XCLAIM", s.stream, s.a.cfg.Group, s.consumer, 0, u.id, "IDLE", 0, "RETRYCOUNT", max(u.count-1, 0), "JUSTID")
		due = append(due, redis.Z{Score: 1, Member: u.id}) // due at once; never 0 (read as "not scheduled")
		if storableTrace(u.trace) {
			traces = append(traces, u.id, u.trace)
		}
	}
	if len(traces) > 0 { // the span contexts claimDue took with them go back with them
		pipe.HSet(ctx, s.a.traceKey(s.stream), traces...)
	}
	pipe.ZAdd(ctx, s.a.retryKey(s.stream), due...)
	if _, err := pipe.Exec(ctx); err != nil {
		s.a.cfg.Logger.Warn("redisstream: could not give back undelivered entries; they are recovered after their reclaim threshold",
			slog.String("stream", s.stream), slog.Int("entries", len(s.unsent)), slog.String("error", err.Error()))
	}
	s.unsent = nil
}

// cleanup waits for the messages in flight, flushes their acks and removes the consumer from
// the group if it holds no pending entry (consumer names are unique per subscription, so
// leaving them would grow the group forever). A consumer that still holds entries stays: its
// entries are reclaimed by the others, and removing it would drop them from the PEL.
func (s *subscription) cleanup() {
	for s.inflight.Load() > 0 {
		select {
		case <-s.freed:
		case <-s.a.closing:
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Acks that fail transiently stay with the acker, which keeps sending them while the
	// adapter is open; the consumer then still holds pending entries and is kept.
	if !s.a.acks.flush(ctx, true) {
		return
	}
	pend, err := s.a.client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: s.stream, Group: s.a.cfg.Group, Start: "-", End: "+", Count: 1, Consumer: s.consumer,
	}).Result()
	if err != nil || len(pend) > 0 {
		return
	}
	if err := s.a.client.XGroupDelConsumer(ctx, s.stream, s.a.cfg.Group, s.consumer).Err(); err != nil {
		s.a.cfg.Logger.Debug("redisstream: could not remove consumer", slog.String("consumer", s.consumer), slog.String("error", err.Error()))
	}
}
