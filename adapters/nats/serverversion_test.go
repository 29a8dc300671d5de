package nats

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestCountsEveryDelivery(t *testing.T) {
	for v, want := range map[string]bool{
		"2.9.10": false, "2.10.13": false, "2.10.14": true, "2.10.29": true, "2.11.0": true,
		"2.12.0-beta.2": true, "2.10.14-RC.1": true, "3.0.0": true, "1.99.99": false,
		"": false, "2.10": false, "2.x.14": false, "2.10.-1": false, "2.10.14.1": false,
	} {
		if got := countsEveryDelivery(v); got != want {
			t.Errorf("countsEveryDelivery(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestServerCountsRedeliveryToDeadPuller checks countsEveryDelivery against the test server
// itself, with a raw nats.go client: a consumer takes a message on a pull request for more and
// disconnects without acknowledging it, so the request stays queued with nobody listening. When
// AckWait sends the message back, the server finds only that dead request. A server with the
// defect steps its position back and delivers the message again as new (NumDelivered 1); a
// fixed one delivers it with NumDelivered above 1. This is the cause of the kill battery's
// "attempt 1 called after attempt 1" on NATS 2.9, and why its bound depends on the version.
func TestServerCountsRedeliveryToDeadPuller(t *testing.T) {
	t.Parallel()
	nc := testConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subject := uniqueSubject(t)
	stream := StreamName(subject)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	const ackWait = 500 * time.Millisecond
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "d", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subject, []byte("m")); err != nil {
		t.Fatal(err)
	}

	// The dying consumer: a pull request for 10 with a long expiry, one message taken, no ack.
	dead, err := nats.Connect(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	inbox := nats.NewInbox()
	sub, err := dead.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(pullRequest{Batch: 10, Expires: time.Minute})
	if err := dead.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream+".d", inbox, req); err != nil {
		t.Fatal(err)
	}
	first, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if md, err := first.Metadata(); err != nil || md.NumDelivered != 1 {
		t.Fatalf("first delivery: metadata %+v, %v", md, err)
	}
	dead.Close() // the request for 9 more stays queued; nobody listens on its inbox

	// Let AckWait pass and the redelivery meet the dead request.
	time.Sleep(3 * ackWait)

	// Collect what comes in the next 2 s, acknowledging nothing: the defect shows as a delivery
	// with NumDelivered 1 among (or instead of) the counted redeliveries.
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var counts []uint64
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, md.NumDelivered)
	}
	if len(counts) == 0 {
		t.Fatalf("no redelivery within 2 s (fetch: %v)", batch.Error())
	}
	again := slices.Contains(counts, 1)
	v := nc.ConnectedServerVersion()
	t.Logf("nats-server %s: the deliveries after the dead pull request had NumDelivered %v", v, counts)
	if countsEveryDelivery(v) == again {
		t.Fatalf("nats-server %s delivered the message again with NumDelivered %v, but countsEveryDelivery says %v", v, counts, countsEveryDelivery(v))
	}
}
