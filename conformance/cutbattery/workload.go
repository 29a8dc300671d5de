package cutbattery

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// msgKind is what the battery's handler does with a message.
type msgKind string

const (
	kindOK          msgKind = "ok"           // succeeds
	kindFailOnce    msgKind = "fail-once"    // its first handler call returns Retry, later calls succeed
	kindFailForever msgKind = "fail-forever" // every call returns Retry: dead-lettered as exhausted
	kindMalformed   msgKind = "malformed"    // every call returns Malformed: dead-lettered at once
	kindProbe       msgKind = "probe"        // succeeds; published after each Restore to time resumption
)

// kindOf is the workload mix: per ten messages, six ok, two fail-once, one fail-forever and one
// malformed; every message that fails writes a retry or a dead letter.
func kindOf(n int) msgKind {
	switch n % 10 {
	case 6, 7:
		return kindFailOnce
	case 8:
		return kindFailForever
	case 9:
		return kindMalformed
	default:
		return kindOK
	}
}

// sentMsg is a message the battery published.
type sentMsg struct {
	kind    msgKind
	payload []byte
}

// newPayload returns a text payload (every broker carries text, SQS only text) with random
// content and multi-byte characters, to check dead letters byte for byte.
func newPayload(n int, kind msgKind) []byte {
	pad := make([]byte, 8+rand.IntN(120))
	for i := range pad {
		pad[i] = byte(rand.Uint32())
	}
	return fmt.Appendf(nil, `{"n":%d,"kind":%q,"text":"naïve café ✓","pad":%q}`, n, kind, base64.StdEncoding.EncodeToString(pad))
}

// call is one handler invocation.
type call struct {
	attempt int
	start   time.Time
	end     time.Time
	result  callResult
}

type callResult uint8

const (
	resultRunning callResult = iota
	resultSuccess
	resultRetry
	resultMalformed
)

// landing is where a cut is meant to land: right after the handler returned an outcome whose
// write follows.
type landing string

const (
	onDeadLetter landing = "dead-letter write"
	onRetry      landing = "retry write"
	onAck        landing = "ack"
	midStream    landing = "mid-stream"
)

// landings is the order cuts take: each cut is armed for the next handler call that ends in
// that outcome, and cuts the proxies before the handler returns, so the write behind it goes
// into the cut.
var landings = []landing{onDeadLetter, onRetry, onAck}

// arm is a cut waiting for its handler call.
type arm struct {
	spot      landing
	fire      func() // cuts the proxies
	once      sync.Once
	fired     chan struct{}
	byHandler atomic.Bool // fired by its handler call, not by the mid-stream fallback
}

// ledger records every handler call and every published message.
type ledger struct {
	maxAttempts int

	mu     sync.Mutex
	sent   map[string]sentMsg
	order  []string // UUIDs in publishing order
	calls  map[string][]*call
	total  int
	last   time.Time                // last handler call start
	probes map[string]chan struct{} // closed at the probe's first call
	armed  *arm
}

func newLedger(maxAttempts int) *ledger {
	return &ledger{maxAttempts: maxAttempts, sent: map[string]sentMsg{}, calls: map[string][]*call{},
		probes: map[string]chan struct{}{}}
}

// newMessage makes message n (or a probe) and records it as sent.
func (l *ledger) newMessage(n int, kind msgKind) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), newPayload(n, kind))
	msg.Metadata.Set("cutbattery-kind", string(kind))
	l.mu.Lock()
	l.sent[msg.UUID] = sentMsg{kind: kind, payload: append([]byte(nil), msg.Payload...)}
	l.order = append(l.order, msg.UUID)
	if kind == kindProbe {
		l.probes[msg.UUID] = make(chan struct{})
	}
	l.mu.Unlock()
	return msg
}

// unsend forgets a message whose publish failed: the battery never counts it.
func (l *ledger) unsend(uuid string) {
	l.mu.Lock()
	delete(l.sent, uuid)
	l.mu.Unlock()
}

// probeSeen returns the channel closed when probe uuid reaches the handler.
func (l *ledger) probeSeen(uuid string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.probes[uuid]
}

// setArm arms a cut for the next call ending in a.spot.
func (l *ledger) setArm(a *arm) {
	l.mu.Lock()
	l.armed = a
	l.mu.Unlock()
}

var (
	errFailOnce    = errors.New("cutbattery: fail-once message, first call")
	errFailForever = errors.New("cutbattery: fail-forever message")
	errMalformed   = errors.New("cutbattery: malformed by the workload")
)

// handle is the battery's handler.
func (l *ledger) handle(_ context.Context, msg *message.Message, a millrace.Attempt) error {
	c := &call{attempt: a.Number, start: time.Now()}
	l.mu.Lock()
	m, known := l.sent[msg.UUID]
	prior := len(l.calls[msg.UUID])
	l.calls[msg.UUID] = append(l.calls[msg.UUID], c)
	l.total++
	l.last = c.start
	if ch := l.probes[msg.UUID]; ch != nil && prior == 0 {
		close(ch)
	}
	l.mu.Unlock()

	var err error
	res := resultSuccess
	switch {
	case !known:
		err = millrace.Malformed(fmt.Errorf("cutbattery: message %s was never published by the battery", msg.UUID))
		res = resultMalformed
	case m.kind == kindFailOnce && prior == 0:
		err, res = millrace.Retry(errFailOnce), resultRetry
	case m.kind == kindFailForever:
		err, res = millrace.Retry(fmt.Errorf("%w (attempt %d)", errFailForever, a.Number)), resultRetry
	case m.kind == kindMalformed:
		err, res = millrace.Malformed(errMalformed), resultMalformed
	}
	var spot landing
	switch {
	case res == resultSuccess:
		spot = onAck
	case res == resultMalformed || a.Number >= l.maxAttempts:
		spot = onDeadLetter
	default:
		spot = onRetry
	}
	l.mu.Lock()
	armed := l.armed
	if armed != nil && armed.spot == spot {
		l.armed = nil
	} else {
		armed = nil
	}
	c.end, c.result = time.Now(), res
	l.mu.Unlock()
	if armed != nil {
		armed.once.Do(func() { armed.byHandler.Store(true); armed.fire(); close(armed.fired) })
	}
	return err
}

// snapshot copies what the verdict needs.
func (l *ledger) snapshot() (sent map[string]sentMsg, calls map[string][]call, total int, last time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent = make(map[string]sentMsg, len(l.sent))
	for k, v := range l.sent {
		sent[k] = v
	}
	calls = make(map[string][]call, len(l.calls))
	for k, cs := range l.calls {
		out := make([]call, len(cs))
		for i, c := range cs {
			out[i] = *c
		}
		calls[k] = out
	}
	return sent, calls, l.total, l.last
}
