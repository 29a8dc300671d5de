package amqp_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// panicDeep panics under n frames, so that the dead letter's stack reaches its 8 KiB bound.
func panicDeep(n int) {
	if n == 0 {
		panic("handler bug")
	}
	panicDeep(n - 1)
}

// A dead letter's content header must fit one frame (RabbitMQ refuses a larger one, and the
// refusal fails the other publishes in flight on the connection). The panic stack gives way
// when it would not fit: a message whose headers leave room keeps it; one within ~12 KiB of
// frame_max (131072) is dead-lettered on its first write without it, its error types kept
// (measured before the change: a 122 KiB header was refused, "broker did not confirm", and the
// message came back past its limit with neither types nor stack).
func TestDeadLetterFitsTheFrame(t *testing.T) {
	policy := millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(time.Second)}
	for _, c := range []struct {
		name  string
		kib   int
		stack bool
	}{
		{"100 KiB of headers keep the stack", 100, true},
		{"124 KiB of headers leave it out", 124, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			a := newAdapter(ctx, t, amqp.Config{})
			topic := uniqueTopic("frame")
			if err := a.Provision(ctx, topic, policy); err != nil {
				t.Fatal(err)
			}
			r, err := router.New(router.Config{Adapter: a, Policy: policy, CloseTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			r.Handle("h", topic, func(context.Context, *message.Message, millrace.Attempt) error { panicDeep(300); return nil })
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			t.Cleanup(func() { cancel(); _ = r.Close(); <-done })
			<-r.Running()
			ch, err := a.Subscriber().Subscribe(rctx, a.DeadLetterTopic(topic))
			if err != nil {
				t.Fatal(err)
			}
			m := message.NewMessage("u-frame", []byte("p"))
			m.Metadata.Set("big", strings.Repeat("x", c.kib<<10))
			if err := a.Publisher().Publish(topic, m); err != nil {
				t.Fatalf("publish: %v", err)
			}
			var dm *message.Message
			select {
			case dm = <-ch:
				dm.Ack()
			case <-time.After(20 * time.Second):
				t.Fatal("no dead letter in 20 s")
			}
			rec, err := deadletter.FromMessage(dm)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rec.ErrorTypes, []string{"*millrace.PanicError"}) || rec.LastError != "panic: handler bug" {
				t.Fatalf("error types %q, last error %q: not the first write's record", rec.ErrorTypes, rec.LastError)
			}
			if (rec.PanicStack != "") != c.stack {
				t.Fatalf("stack kept %v (%d bytes), want %v", rec.PanicStack != "", len(rec.PanicStack), c.stack)
			}
			if c.stack && len(rec.PanicStack) < deadletter.MaxPanicStackBytes/2 {
				t.Fatalf("stack of %d bytes: the test wants one near the bound", len(rec.PanicStack))
			}
			if len(rec.Metadata["big"]) != c.kib<<10 {
				t.Fatalf("the original header altered: %d bytes", len(rec.Metadata["big"]))
			}
		})
	}
}
