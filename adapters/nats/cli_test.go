package nats

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/clitest"
)

// The CLI tests of this file run the millrace command, built once for this test process.
func TestMain(m *testing.M) { os.Exit(clitest.Main(m)) }

// TestCLIEndToEndNATSDeadLetterStream: the message exhausts its retries into the <subject>.dlq
// stream; the millrace command, opening nats:// with no durable (it never consumes), lists and
// shows it, refuses a replay to a subject without a stream, replays it to its subject, where the
// healthy handler takes it as attempt 1, and leaves the dead-letter stream empty.
func TestCLIEndToEndNATSDeadLetterStream(t *testing.T) {
	a := newTestAdapter(t, testConfig())
	subject := uniqueSubject(t)
	h := clitest.FailingRouter(t, a, subject, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(100 * time.Millisecond)}, time.Second)
	payload := []byte(`{"order":7,"note":"naïve ✓"}`)
	if err := a.Publisher().Publish(subject, message.NewMessage("uuid-nats-e2e", payload)); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(testConn(t))
	if err != nil {
		t.Fatal(err)
	}
	dlqSize := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, StreamName(a.DeadLetterTopic(subject)))
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.State.Msgs)
	}
	clitest.BrokerDLQRoundTrip(t, h, natsURL(),
		clitest.DeadLetter{Topic: subject, UUID: "uuid-nats-e2e", Payload: payload, Broker: Broker, Attempts: 2}, dlqSize)
}
