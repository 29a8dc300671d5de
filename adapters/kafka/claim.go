package kafka

import (
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// groupHandler runs one group session: one goroutine per claimed partition (sarama's), each
// delivering its records one at a time.
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

// Setup starts the session's committer: it commits the marked offsets whenever a record was
// acknowledged, one commit at a time, so acknowledgements arriving during a commit share the
// next one.
func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	h.sub.a.sessions.Add(1)
	go func() {
		defer close(h.stopped)
		for {
			select {
			case <-h.commitNow:
				sess.Commit()
			case <-h.stop:
				return
			}
		}
	}()
	return nil
}

// Cleanup runs after every claim returned: it stops the committer and commits the last marks
// before sarama releases the partitions (its own auto-commit, which would, is off).
func (h *groupHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
	close(h.stop)
	<-h.stopped
	sess.Commit()
	return nil
}

// committed marks rec as done and has its offset committed.
func (h *groupHandler) committed(sess sarama.ConsumerGroupSession, rec *sarama.ConsumerMessage) {
	sess.MarkMessage(rec, "")
	if h.sub.a.cfg.SyncCommit {
		sess.Commit()
		return
	}
	select {
	case h.commitNow <- struct{}{}:
	default: // a commit is already pending; it will include this mark
	}
}

// ConsumeClaim delivers the claim's records in order until the session or subscription ends.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	tierDelay, fromRetryTopic := h.tiers[claim.Topic()]
	for {
		select {
		case rec, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			if !h.handle(sess, rec, fromRetryTopic, tierDelay) {
				return nil
			}
		case <-sess.Context().Done():
			return nil
		case <-h.sub.ctx.Done():
			return nil
		}
	}
}

// handle delivers one record until it is acknowledged, then marks its offset and has it
// committed. It reports false when the session or subscription ended first; the record is then
// left uncommitted for the partition's next owner.
func (h *groupHandler) handle(sess sarama.ConsumerGroupSession, rec *sarama.ConsumerMessage, fromRetryTopic bool, tierDelay time.Duration) bool {
	s := h.sub
	d := delivery{
		RecordInfo:     RecordInfo{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Timestamp: rec.Timestamp},
		source:         s.topic,
		fromRetryTopic: fromRetryTopic,
	}
	template := toMessage(rec)
	var decodeErr error
	d.attempt, decodeErr = decodeAttempt(template.Metadata, fromRetryTopic)
	if fromRetryTopic && decodeErr == nil {
		if !h.waitUntilDue(sess, rec, template.Metadata, tierDelay) {
			return false
		}
	}
	d.firstAt = time.Now()
	for d.count = 1; ; d.count++ {
		msg := message.NewMessage(template.UUID, template.Payload)
		for k, v := range template.Metadata {
			msg.Metadata[k] = v
		}
		dc := d // each delivery gets its own state: the previous one may still be referenced
		ctx := withDelivery(s.ctx, &dc)
		if decodeErr != nil {
			ctx = millrace.WithDecodeError(ctx, decodeErr)
		}
		msg.SetContext(ctx)
		select {
		case s.out <- msg:
		case <-sess.Context().Done():
			return false
		case <-s.ctx.Done():
			return false
		}
		// The session may end (rebalance) while the handler runs: keep waiting for the verdict,
		// since sarama releases the partition only after this claim returns, and a mark made
		// before that is still committed.
		select {
		case <-msg.Acked():
			h.committed(sess, rec)
			return true
		case <-msg.Nacked():
		case <-s.ctx.Done():
			return false
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
	}
}

// clockSlack is how far a not-before time may lie beyond its record's timestamp plus the tier
// delay before it counts as untrusted.
const clockSlack = time.Second

// waitUntilDue holds a retry record until its not-before time with its partition paused, so no
// more records are fetched for it while other partitions flow and heartbeats go on. Untrusted
// headers cannot hold a partition longer than the record's tier delay (Config.MaxDelay when the
// tier is unknown) plus clockSlack after the record was written. It reports false when the session or
// subscription ended first.
func (h *groupHandler) waitUntilDue(sess sarama.ConsumerGroupSession, rec *sarama.ConsumerMessage, md message.Metadata, tierDelay time.Duration) bool {
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
	wait := time.Until(due)
	if wait <= 0 {
		return true
	}
	partition := map[string][]int32{rec.Topic: {rec.Partition}}
	s.group.Pause(partition)
	defer s.group.Resume(partition)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-sess.Context().Done():
		return false
	case <-s.ctx.Done():
		return false
	}
}
