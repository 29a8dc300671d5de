package redisstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Sending acks of IDs boxed as a read's reply holds them (delivery.ackID) allocates per flush,
// not per ID: go-redis's XAck took the IDs as strings and boxed each one again, one allocation
// per message (issue 16). Not parallel: AllocsPerRun counts the whole process's allocations.
func TestAckerFlushDoesNotAllocatePerID(t *testing.T) {
	client := testClient(t)
	k := newAcker(client, quiet)
	key := ackKey{stream: uniqueStream(t), group: "millrace-test"} // XACK on a missing stream: 0
	const n = 4096
	ids := make([]any, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%d-1", i+1)
	}
	var failed bool
	allocs := testing.AllocsPerRun(3, func() {
		for _, id := range ids {
			k.add(key, id)
		}
		failed = failed || !k.flush(context.Background(), false)
	})
	if failed {
		t.Fatal("an XACK failed")
	}
	if allocs > n/8 {
		t.Fatalf("%.0f allocations to ack %d IDs, want at most %d (a few per flush, none per ID)", allocs, n, n/8)
	}
	t.Logf("%.0f allocations to ack %d IDs", allocs, n)
}

// A delivered message carries its entry ID boxed as the read's reply held it, so that its ack
// costs no allocation (delivery.ackID): TestAckerFlushDoesNotAllocatePerID measures the acker
// given such IDs, this checks the subscription hands them over.
func TestDeliveryKeepsTheRepliedID(t *testing.T) {
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	msgs := subscribePublished(t, a, stream, message.NewMessage(watermill.NewUUID(), []byte("x")))
	select {
	case m := <-msgs:
		d := deliveryCtxOf(m).d
		if s, ok := d.idArg.(string); !ok || s != d.id {
			t.Errorf("delivery %s carries %#v as its reply's ID", d.id, d.idArg)
		}
		m.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
}
