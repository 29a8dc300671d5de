package idempotency

import (
	"context"
	"strings"
	"testing"
	"time"

	itestenv "github.com/millrace/millrace/idempotency/internal/testenv"
)

// TestClaimBatchDuplicateKeyLostReply is the second review's L2: a batch naming one key twice
// whose SET NX pipeline loses its reply (the proxy forwards the first SET, then drops the
// connection before its reply) must still acquire the key once. Before, both SETs were taken
// for this call's own, and once the GET found the lease holding the owner both occurrences
// were ACQUIRED: two messages with one key would both run the handler.
func TestClaimBatchDuplicateKeyLostReply(t *testing.T) {
	t.Parallel()
	prefix := itestenv.Prefix(t)
	p := cutProxy(t, func(args []string) bool { return len(args) > 0 && strings.EqualFold(args[0], "set") })
	store := proxiedStore(t, p, prefix)
	go func() {
		time.Sleep(300 * time.Millisecond)
		if err := p.Accept(); err != nil {
			t.Errorf("proxy accept: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := store.ClaimBatch(ctx, []string{"d1", "other", "d1"}, "o1", time.Minute)
	if err != nil || len(res) != 3 || res[0] != Acquired || res[1] != Acquired || res[2] != Busy {
		t.Fatalf("ClaimBatch [d1 other d1] whose SET NX reply was lost: %v, %v; want [ACQUIRED ACQUIRED BUSY]", res, err)
	}
}

// TestClaimBatchDuplicateKey: without a fault, later occurrences of a key get the first one's
// result, BUSY where it is ACQUIRED (as when each SET NX was sent), and DONE for a done key.
func TestClaimBatchDuplicateKey(t *testing.T) {
	t.Parallel()
	direct := itestenv.Redis(t, nil)
	prefix := itestenv.Prefix(t)
	itestenv.DeleteRedisPrefix(t, direct, prefix)
	store, err := NewRedisStore(direct, StoreOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := direct.Set(ctx, store.opts.processedKey("done"), DoneValue, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := direct.Set(ctx, store.opts.processedKey("held"), "someone", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := store.ClaimBatch(ctx, []string{"k", "done", "k", "held", "done", "held", "k"}, "o1", time.Minute)
	want := []ClaimResult{Acquired, Done, Busy, Busy, Done, Busy, Busy}
	if err != nil || len(res) != len(want) {
		t.Fatalf("ClaimBatch: %v, %v; want %v", res, err, want)
	}
	for i := range want {
		if res[i] != want[i] {
			t.Fatalf("ClaimBatch: %v; want %v", res, want)
		}
	}
}
