package router

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// settle runs the handler h on msg and keeps the router's promise to msg's Settler s
// (millrace.WithRouterSettles): it acks or nacks msg as Watermill's router would right after
// dispatch returns (an error nacks, success acks), then tells s the verdict, once.
//
// Why: an adapter otherwise starts a goroutine per message that waits on msg.Acked() and
// msg.Nacked(); waking it costs every message a goroutine switch, often on the other core
// (measured on Redis Streams: see adapters/redisstream/README.md).
//
// Watermill's router acks or nacks after dispatch returns: a second Ack or Nack changes
// nothing, so the verdict s hears is the one msg keeps. A handler that returned messages to
// publish (a Watermill handler with a publisher, added to Watermill() directly) is acked only
// once Watermill published them, so for those s is told by a goroutine that waits for it. A
// panic nacks msg, as Watermill's recovery does, and goes on up.
func settle(msg *message.Message, s millrace.Settler, h message.HandlerFunc) (out []*message.Message, err error) {
	done := false
	defer func() {
		if done {
			return
		}
		// h panicked (or called runtime.Goexit): Watermill nacks it on recovery.
		msg.Nack()
		s.Settle(msg, acked(msg))
	}()
	out, err = h(msg)
	done = true
	switch {
	case err != nil:
		msg.Nack()
	case len(out) > 0:
		go func() {
			select {
			case <-msg.Acked():
				s.Settle(msg, true)
			case <-msg.Nacked():
				s.Settle(msg, false)
			}
		}()
		return out, err
	default:
		msg.Ack()
	}
	s.Settle(msg, acked(msg))
	return out, err
}

// acked reports whether msg was acked; it must have been acked or nacked.
func acked(msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	default:
		return false
	}
}
