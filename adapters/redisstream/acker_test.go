package redisstream

import (
	"context"
	"fmt"
	"testing"
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
