package router

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// verdicts records what a millrace.Settler is told.
type verdicts struct {
	mu  sync.Mutex
	got []bool
	ch  chan struct{}
}

func newVerdicts() *verdicts { return &verdicts{ch: make(chan struct{}, 16)} }

func (v *verdicts) Settle(_ *message.Message, acked bool) {
	v.mu.Lock()
	v.got = append(v.got, acked)
	v.mu.Unlock()
	v.ch <- struct{}{}
}

func (v *verdicts) all() []bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]bool(nil), v.got...)
}

func TestSettleTellsTheVerdictOnce(t *testing.T) {
	fail := errors.New("fail")
	for _, tc := range []struct {
		name  string
		h     message.HandlerFunc
		acked bool
	}{
		{"success acks", func(*message.Message) ([]*message.Message, error) { return nil, nil }, true},
		{"an error nacks", func(*message.Message) ([]*message.Message, error) { return nil, fail }, false},
		{"an error with messages nacks", func(*message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("out", nil)}, fail
		}, false},
		// A handler that nacked its message itself and returned nil: Watermill's later Ack
		// changes nothing, so the message stays nacked and that is the verdict.
		{"a nack inside stays", func(m *message.Message) ([]*message.Message, error) { m.Nack(); return nil, nil }, false},
		{"an ack inside stays", func(m *message.Message) ([]*message.Message, error) { m.Ack(); return nil, fail }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := message.NewMessage(watermill.NewUUID(), nil)
			v := newVerdicts()
			_, _ = settle(msg, v, tc.h)
			if got := v.all(); len(got) != 1 || got[0] != tc.acked {
				t.Fatalf("verdicts %v, want [%v]", got, tc.acked)
			}
			select { // the message is settled as the verdict says
			case <-msg.Acked():
				if !tc.acked {
					t.Fatal("acked, verdict nack")
				}
			case <-msg.Nacked():
				if tc.acked {
					t.Fatal("nacked, verdict ack")
				}
			default:
				t.Fatal("neither acked nor nacked")
			}
		})
	}
}

func TestSettleOnPanicNacksAndPanicsOn(t *testing.T) {
	msg := message.NewMessage(watermill.NewUUID(), nil)
	v := newVerdicts()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not go on up (Watermill's recovery logs it)")
			}
		}()
		_, _ = settle(msg, v, func(*message.Message) ([]*message.Message, error) { panic("boom") })
	}()
	if got := v.all(); len(got) != 1 || got[0] {
		t.Fatalf("verdicts %v, want [false]", got)
	}
}

// A handler's messages are published by Watermill after dispatch returns, and the message is
// acked (or nacked, if the publish fails) only then: the Settler hears it then, not before.
func TestSettleWaitsForWatermillsPublish(t *testing.T) {
	for _, ack := range []bool{true, false} {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		v := newVerdicts()
		out, err := settle(msg, v, func(*message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("out", nil)}, nil
		})
		if err != nil || len(out) != 1 {
			t.Fatalf("settle returned %d messages, %v", len(out), err)
		}
		select {
		case <-v.ch:
			t.Fatal("told before Watermill published and settled the message")
		case <-time.After(50 * time.Millisecond):
		}
		if ack {
			msg.Ack()
		} else {
			msg.Nack()
		}
		select {
		case <-v.ch:
		case <-time.After(5 * time.Second):
			t.Fatal("never told")
		}
		if got := v.all(); len(got) != 1 || got[0] != ack {
			t.Fatalf("verdicts %v, want [%v]", got, ack)
		}
	}
}
