package kafka

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
)

// producer writes records through one sarama AsyncProducer and returns to each caller once the
// brokers acknowledged every record it sent (acks=all), or with the first failure. Records of
// one call travel together, and records of concurrent calls share produce requests as sarama's
// flush settings allow.
type producer struct {
	ap         sarama.AsyncProducer
	marsh      marshaler
	limit      int            // its Producer.MaxMessageBytes
	collecting sync.WaitGroup // ends with collectLoop
}

// sendGroup is one send call's records in flight.
type sendGroup struct {
	left atomic.Int32
	err  atomic.Pointer[error] // the first failure
	done chan struct{}
}

func (g *sendGroup) finish(err error) {
	if err != nil {
		g.err.CompareAndSwap(nil, &err)
	}
	if g.left.Add(-1) == 0 {
		close(g.done)
	}
}

// newProducer connects an AsyncProducer. sc must return successes and errors.
func newProducer(brokers []string, sc *sarama.Config, m marshaler) (*producer, error) {
	ap, err := sarama.NewAsyncProducer(brokers, sc)
	if err != nil {
		return nil, err
	}
	p := &producer{ap: ap, marsh: m}
	p.collecting.Go(p.collectLoop)
	return p, nil
}

// send writes msgs to topic and waits until each is acknowledged or failed. On failure it
// returns the first error; the other records may have been written.
func (p *producer) send(topic string, msgs []*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	g := &sendGroup{done: make(chan struct{})}
	pms := make([]*sarama.ProducerMessage, len(msgs))
	for i, msg := range msgs {
		pm, err := p.marsh.Marshal(topic, msg)
		if err != nil {
			return fmt.Errorf("kafka: marshal message %s: %w", msg.UUID, err)
		}
		pm.Metadata = g
		pms[i] = pm
	}
	g.left.Store(int32(len(pms)))
	for _, pm := range pms {
		p.ap.Input() <- pm
	}
	<-g.done
	if err := g.err.Load(); err != nil {
		return *err
	}
	return nil
}

// collectLoop reports each acknowledged or failed record to its sender until the producer
// closed both channels.
func (p *producer) collectLoop() {
	succ, errs := p.ap.Successes(), p.ap.Errors()
	for succ != nil || errs != nil {
		select {
		case pm, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			pm.Metadata.(*sendGroup).finish(nil)
		case pe, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			err := pe.Err
			if err == nil {
				err = errors.New("kafka: produce failed")
			}
			pe.Msg.Metadata.(*sendGroup).finish(err)
		}
	}
}

// close stops the producer. No send may be in progress or follow: every record sent was
// acknowledged or failed, so nothing is left to flush.
func (p *producer) close() {
	p.ap.AsyncClose()
	p.collecting.Wait()
}
