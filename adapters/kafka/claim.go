package kafka

import (
	"context"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// groupHandler runs one group session: one goroutine per claimed partition (sarama's), each
// feeding its records through a pipeline (see pipeline.go).
type groupHandler struct {
	sub   *subscription
	tiers map[string]time.Duration // retry topic -> its delay (0 if unknown)

	commitNow chan struct{} // holds a token while marks wait for the committer
	stop      chan struct{}
	stopped   chan struct{}
}

func newGroupHandler(sub *subscription, tiers map[string]time.Duration) *groupHandler {
	return &groupHandler{sub: sub, tiers: tiers, commitNow: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{})}
}

// Setup starts the session's committer in Config.AtLeastOnce mode: it commits the marked
// offsets whenever a record was acknowledged, one commit at a time and at most one per
// Config.CommitInterval, so acknowledgements arriving during a commit or the interval after it
// share the next one. In transactional mode each claimed partition commits its own (txn.go).
func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	h.sub.a.sessions.Add(1)
	if !h.sub.a.cfg.AtLeastOnce {
		close(h.stopped)
		return nil
	}
	interval := h.sub.a.cfg.CommitInterval
	go func() {
		defer close(h.stopped)
		pause := time.NewTimer(interval)
		defer pause.Stop()
		for {
			select {
			case <-h.commitNow:
				h.commitMarks(sess)
			case <-h.stop:
				return
			}
			pause.Reset(interval)
			select {
			case <-pause.C:
			case <-h.stop:
				return // Cleanup commits the marks made meanwhile
			}
		}
	}()
	return nil
}

// Cleanup runs after every claim returned: it stops the committer and commits the last marks
// before sarama releases the partitions (its own auto-commit is off). Marks whose commit
// failed then are dropped: the partitions' next owners handle those records again.
func (h *groupHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
	close(h.stop)
	<-h.stopped
	if h.sub.a.cfg.AtLeastOnce {
		h.commitMarks(sess)
		h.sub.offsets.forget()
	}
	return nil
}

// commitMarks commits the marks made so far, logging a failure (the marks stay for the next
// commit).
func (h *groupHandler) commitMarks(sess sarama.ConsumerGroupSession) {
	if err := h.sub.offsets.commit(sess); err != nil && h.sub.ctx.Err() == nil {
		h.sub.logger.Warn("kafka: offset commit failed; the marks are committed with the next one", slog.String("error", err.Error()))
	}
}

// commit has the marks made so far committed (Config.AtLeastOnce mode): at once (SyncCommit;
// the caller's worker takes its next record, of the same key, only after this returns), or by
// the committer.
func (h *groupHandler) commit(sess sarama.ConsumerGroupSession) {
	if h.sub.a.cfg.SyncCommit {
		h.commitMarks(sess)
		return
	}
	select {
	case h.commitNow <- struct{}{}:
	default: // a commit is already pending; it will include this mark
	}
}

// ConsumeClaim feeds the claim's records through a pipeline (up to Config.MaxInFlight at once,
// records of one key in order) until the session or subscription ends. It returns only after every record
// it handed out was acknowledged or abandoned, so sarama commits the last marks before the
// partition moves.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	tierDelay, fromRetryTopic := h.tiers[claim.Topic()]
	p := newPipeline(h, sess, claim.Topic(), claim.Partition())
	if !h.sub.a.cfg.AtLeastOnce {
		if p.txn = h.startTxn(sess, p); p.txn == nil {
			return nil
		}
		defer p.txn.close() // after the pipeline's records finished (defers run last first)
	}
	defer p.close()
	if fromRetryTopic {
		h.consumeRetries(sess, claim, p, tierDelay)
		return nil
	}
	for {
		var rec *sarama.ConsumerMessage
		select {
		case r, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			rec = r
		case <-sess.Context().Done():
			return nil
		case <-h.sub.ctx.Done():
			return nil
		case <-p.txnDead():
			// Returning ends the session: the member rejoins and the partition's next owner
			// (this member again, or another) starts a producer under the new generation.
			return nil
		}
		if !p.admit(h.decode(rec, false)) {
			return nil
		}
	}
}

// startTxn connects the transactional producer of p's partition, trying again every
// ReconnectDelay while the brokers refuse. It returns nil when the session or subscription
// ended first.
func (h *groupHandler) startTxn(sess sarama.ConsumerGroupSession, p *pipeline) *txnCommitter {
	s := h.sub
	var warn warnEvery
	for {
		t, err := newTxnCommitter(p, s.a.txnConfigFor(s.topic))
		if err == nil {
			return t
		}
		s.logger.Log(s.ctx, warn.level(), "kafka: cannot start the partition's transactional producer; retrying (no record of it is handled meanwhile)",
			slog.String("topic", p.topic), slog.Int("partition", int(p.partition)), slog.String("error", err.Error()))
		select {
		case <-time.After(s.a.cfg.ReconnectDelay):
		case <-sess.Context().Done():
			return nil
		case <-s.ctx.Done():
			return nil
		}
	}
}

// decode reads a record's message, its original headers apart from millrace's retry state, and
// its attempt history (from that state only).
func (h *groupHandler) decode(rec *sarama.ConsumerMessage, fromRetryTopic bool) *flight {
	f := &flight{
		d: delivery{
			RecordInfo:     RecordInfo{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Timestamp: rec.Timestamp},
			source:         h.sub.topic,
			fromRetryTopic: fromRetryTopic,
		},
		rec: rec,
		msg: toMessage(rec),
	}
	f.d.value = rec.Value
	var splitErr error
	f.d.orig, f.d.state, splitErr = splitHeaders(nonNil(rec.Headers), fromRetryTopic)
	f.d.attempt, f.d.stateMD, f.decodeErr = attemptState(f.d.state, fromRetryTopic)
	if splitErr != nil {
		f.decodeErr = splitErr
	}
	return f
}

// deliver hands a record of p to the subscriber until it is acknowledged, and reports whether
// it was. It reports false when the session or subscription ended first; the record is then
// left unmarked for the partition's next owner.
func (h *groupHandler) deliver(p *pipeline, f *flight) bool {
	s := h.sub
	sess := p.sess
	d := f.d
	d.firstAt = time.Now()
	d.pipe, d.flight = p, f
	for d.count = 1; ; d.count++ {
		// The first delivery takes the message decoded for admission; a redelivery decodes the
		// record again, since the handler may have changed the first one's metadata.
		msg := f.msg
		f.msg = nil
		if msg == nil {
			msg = toMessage(f.rec)
		}
		dc := d // each delivery gets its own state: the previous one may still be referenced
		// The handler's context is not cancelled when the subscription closes: a handler
		// running then finishes and its verdict counts, as on the other adapters.
		ctx := withDelivery(context.WithoutCancel(s.ctx), &dc)
		if f.decodeErr != nil {
			ctx = millrace.WithDecodeError(ctx, f.decodeErr)
		}
		msg.SetContext(ctx)
		select {
		case s.out <- msg:
		case <-sess.Context().Done():
			return false
		case <-s.ctx.Done():
			return false
		}
		// The session may end (rebalance) or the subscription close while the handler runs:
		// keep waiting for the verdict, since sarama releases the partition only after the
		// claim returns, and a mark made before that is still committed.
		select {
		case <-msg.Acked():
			return true
		case <-msg.Nacked():
			if p.isStaged(f) {
				// Its retry or dead letter is in the partition's transaction: delivering it
				// again would start a second chain.
				return true
			}
		}
		// Nacked: the retry or dead letter could not be written. Deliver the same record again
		// after NackDelay, without marking it; a rebalance meanwhile hands it to the next owner.
		select {
		case <-time.After(s.a.cfg.NackDelay):
		case <-sess.Context().Done():
			return false
		case <-s.ctx.Done():
			return false
		}
		if !p.retakeSlot(f) {
			return false
		}
	}
}

// clockSlack is how far a not-before time may lie beyond its record's timestamp plus the tier
// delay before it counts as untrusted.
const clockSlack = time.Second

// dueTime is when a retry record may be handled: its not-before time, except that untrusted
// headers cannot hold a partition longer than the record's tier delay (Config.MaxDelay when
// the tier is unknown) plus clockSlack after the record was written.
func (h *groupHandler) dueTime(rec *sarama.ConsumerMessage, md message.Metadata, tierDelay time.Duration) time.Time {
	s := h.sub
	due := notBefore(md)
	bound := tierDelay
	if bound <= 0 {
		bound = s.a.cfg.MaxDelay
	}
	// The slack covers millisecond record timestamps and clock skew between hosts.
	if latest := rec.Timestamp.Add(bound + clockSlack); rec.Timestamp.Unix() > 0 && due.After(latest) {
		s.logger.Warn("kafka: retry record's not-before exceeds its tier delay; shortened",
			slog.String("record", RecordInfo{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}.nativeID()),
			slog.Time("not_before", due), slog.Duration("tier_delay", bound))
		due = latest
	}
	return due
}
