package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace/deadletter"
)

// advisoryRetries is how many times the safety net tries to write one dead letter.
const advisoryRetries = 5

// maxDeliveriesAdvisory is the part of JetStream's max-deliveries advisory the safety net reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// AdvisorySubject is the subject of the max-deliveries advisory of the durable consumer of
// subject.
func (a *Adapter) AdvisorySubject(subject string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + a.cfg.StreamName(subject) + "." + a.cfg.Durable
}

// watchMaxDeliveries starts the safety net of a subscription of subject when MaxDeliver is
// positive: a queue subscription (one member per durable gets each advisory) to the
// max-deliveries advisory, which dead-letters the message JetStream stopped delivering. It
// returns the function that stops it.
func (a *Adapter) watchMaxDeliveries(subject string) (func(), error) {
	if a.cfg.MaxDeliver <= 0 {
		return func() {}, nil
	}
	sub, err := a.nc.QueueSubscribe(a.AdvisorySubject(subject), "millrace."+a.cfg.Durable, func(m *nats.Msg) {
		var adv maxDeliveriesAdvisory
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
			a.cfg.Logger.Warn("nats: unreadable max-deliveries advisory", "subject", m.Subject, "error", err)
			return
		}
		go a.deadLetterGivenUp(subject, adv)
	})
	if err != nil {
		return nil, fmt.Errorf("nats: subscribe to the max-deliveries advisory of %q: %w", subject, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// deadLetterGivenUp writes the dead letter of the message adv names, as DeadLetter would (the
// stored data and headers exactly, reason exhausted), retrying a failed write a few times.
func (a *Adapter) deadLetterGivenUp(subject string, adv maxDeliveriesAdvisory) {
	log := a.cfg.Logger.With("subject", subject, "seq", adv.StreamSeq, "deliveries", adv.Deliveries)
	var err error
	for try := range advisoryRetries {
		if try > 0 {
			time.Sleep(time.Duration(try) * time.Second)
		}
		if a.isClosed() {
			break
		}
		if err = a.writeGivenUp(subject, adv); err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
	}
	switch {
	case err == nil:
		log.Warn("nats: JetStream stopped delivering a message (MaxDeliver); dead-lettered it from the max-deliveries advisory")
	case errors.Is(err, jetstream.ErrMsgNotFound):
		log.Warn("nats: JetStream stopped delivering a message that is no longer in the stream", "error", err)
	default:
		log.Error("nats: JetStream stopped delivering a message and its dead letter could not be written: it stays in the stream, undelivered", "error", err)
	}
}

func (a *Adapter) writeGivenUp(subject string, adv maxDeliveriesAdvisory) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := a.js.Stream(ctx, a.cfg.StreamName(subject))
	if err != nil {
		return err
	}
	m, err := s.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		return err
	}
	n := int(min(adv.Deliveries, math.MaxInt32))
	rec := deadletter.Record{
		UUID:           m.Header.Get(UUIDHeader),
		Payload:        m.Data,
		Reason:         deadletter.Exhausted,
		Attempts:       max(n, 1),
		LastError:      "millrace: JetStream stopped delivering the message after " + strconv.Itoa(n) + " deliveries (MaxDeliver " + strconv.Itoa(a.cfg.MaxDeliver) + "); dead-lettered from the max-deliveries advisory",
		OriginalTopic:  m.Subject,
		Broker:         Broker,
		NativeID:       strconv.FormatUint(m.Sequence, 10),
		FirstFailureAt: m.Time,
		LastFailureAt:  time.Now(),
	}
	return a.publishDeadLetter(ctx, deadLetterMsg(a.DeadLetterTopic(m.Subject), m.Header, m.Data, rec))
}
