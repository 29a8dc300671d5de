// Package storetest is the conformance suite every idempotency.Store implementation passes.
// It runs against real backends; there are no mocks.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
)

// NewStore returns a fresh store honouring opts (a unique Prefix per test, sometimes a short
// SentTTL). It arranges its own cleanup through t.
type NewStore func(t *testing.T, opts idempotency.StoreOptions) idempotency.Store

// Timing of the expiry cases: leases that must outlive a step, short ones that must expire
// during a pause, and medium ones that must outlive one store call and then expire.
const (
	long   = 30 * time.Second
	short  = 400 * time.Millisecond
	pause  = 700 * time.Millisecond
	medium = time.Second
	wait   = 1300 * time.Millisecond
)

// RunStoreTests runs the suite against stores made by newStore. Subtests run in parallel.
func RunStoreTests(t *testing.T, newStore NewStore) {
	cases := []struct {
		name string
		run  func(t *testing.T, s idempotency.Store)
		opts idempotency.StoreOptions
	}{
		{name: "ClaimCompleteDone", run: testClaimCompleteDone},
		{name: "BusyWhileHeld", run: testBusyWhileHeld},
		{name: "ReleaseAllowsReclaim", run: testReleaseAllowsReclaim},
		{name: "WrongOwnerLosesLease", run: testWrongOwner},
		{name: "LeaseExpiresAndIsTakenOver", run: testLeaseExpiry},
		{name: "DoneExpires", run: testDoneExpires},
		{name: "SentRecipients", run: testSent},
		{name: "SentSurvivesTakeover", run: testSentSurvivesTakeover},
		{name: "SentExpires", run: testSentExpires, opts: idempotency.StoreOptions{SentTTL: medium}},
		{name: "ConcurrentClaimsOneWinner", run: testConcurrentClaims},
		{name: "InvalidArguments", run: testInvalidArguments},
		{name: "KeysAreIndependent", run: testKeysIndependent},
	}
	t.Run("PrefixesAreIndependent", func(t *testing.T) {
		t.Parallel()
		a := newStore(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t) + "a:"})
		b := newStore(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t) + "b:"})
		mustClaim(t, a, "m1", "owner-a", long, idempotency.Acquired)
		wantErr(t, "MarkSent in a", a.MarkSent(ctx(t), "m1", "owner-a", "r"), nil)
		mustClaim(t, b, "m1", "owner-b", long, idempotency.Acquired)
		wantSent(t, b, "m1", "r", false)
		wantErr(t, "Complete in a", a.Complete(ctx(t), "m1", "owner-a", long), nil)
		wantErr(t, "Complete in b", b.Complete(ctx(t), "m1", "owner-b", long), nil)
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts := c.opts
			opts.Prefix = testenv.Prefix(t)
			c.run(t, newStore(t, opts))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func mustClaim(t *testing.T, s idempotency.Store, key, owner string, ttl time.Duration, want idempotency.ClaimResult) {
	t.Helper()
	got, err := s.Claim(ctx(t), key, owner, ttl)
	if err != nil {
		t.Fatalf("Claim(%q, %q): %v", key, owner, err)
	}
	if got != want {
		t.Fatalf("Claim(%q, %q) = %s, want %s", key, owner, got, want)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if target == nil {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", what, err)
		}
		return
	}
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want errors.Is %v", what, err, target)
	}
}

func wantSent(t *testing.T, s idempotency.Store, key, recipient string, want bool) {
	t.Helper()
	got, err := s.WasSent(ctx(t), key, recipient)
	if err != nil {
		t.Fatalf("WasSent(%q, %q): %v", key, recipient, err)
	}
	if got != want {
		t.Fatalf("WasSent(%q, %q) = %v, want %v", key, recipient, got, want)
	}
}

func testClaimCompleteDone(t *testing.T, s idempotency.Store) {
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Acquired)
	wantErr(t, "Complete by owner", s.Complete(ctx(t), "m1", "owner-a", long), nil)
	mustClaim(t, s, "m1", "owner-b", long, idempotency.Done)
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Done)
	wantErr(t, "second Complete (value is done)", s.Complete(ctx(t), "m1", "owner-a", long), idempotency.ErrLeaseLost)
	wantErr(t, "Release of a done message", s.Release(ctx(t), "m1", "owner-a"), idempotency.ErrLeaseLost)
	mustClaim(t, s, "m1", "owner-c", long, idempotency.Done)
}

func testBusyWhileHeld(t *testing.T, s idempotency.Store) {
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Acquired)
	mustClaim(t, s, "m1", "owner-b", long, idempotency.Busy)
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Busy) // owners are unique per claim
	// The failed claims did not disturb the holder.
	wantErr(t, "Complete by holder", s.Complete(ctx(t), "m1", "owner-a", long), nil)
}

func testReleaseAllowsReclaim(t *testing.T, s idempotency.Store) {
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Acquired)
	wantErr(t, "Release by owner", s.Release(ctx(t), "m1", "owner-a"), nil)
	wantErr(t, "second Release", s.Release(ctx(t), "m1", "owner-a"), idempotency.ErrLeaseLost)
	mustClaim(t, s, "m1", "owner-b", long, idempotency.Acquired)
	wantErr(t, "Complete by released owner", s.Complete(ctx(t), "m1", "owner-a", long), idempotency.ErrLeaseLost)
	wantErr(t, "MarkSent by released owner", s.MarkSent(ctx(t), "m1", "owner-a", "r"), idempotency.ErrLeaseLost)
	wantErr(t, "Complete by new owner", s.Complete(ctx(t), "m1", "owner-b", long), nil)
}

func testWrongOwner(t *testing.T, s idempotency.Store) {
	wantErr(t, "Complete of an unknown key", s.Complete(ctx(t), "m1", "owner-a", long), idempotency.ErrLeaseLost)
	wantErr(t, "Release of an unknown key", s.Release(ctx(t), "m1", "owner-a"), idempotency.ErrLeaseLost)
	wantErr(t, "MarkSent of an unknown key", s.MarkSent(ctx(t), "m1", "owner-a", "r"), idempotency.ErrLeaseLost)
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Acquired)
	wantErr(t, "Complete by intruder", s.Complete(ctx(t), "m1", "owner-b", long), idempotency.ErrLeaseLost)
	wantErr(t, "Release by intruder", s.Release(ctx(t), "m1", "owner-b"), idempotency.ErrLeaseLost)
	wantErr(t, "MarkSent by intruder", s.MarkSent(ctx(t), "m1", "owner-b", "r"), idempotency.ErrLeaseLost)
	wantSent(t, s, "m1", "r", false)
	// The intruder changed nothing: the holder's lease is intact and still exclusive.
	mustClaim(t, s, "m1", "owner-c", long, idempotency.Busy)
	wantErr(t, "Complete by holder", s.Complete(ctx(t), "m1", "owner-a", long), nil)
}

func testLeaseExpiry(t *testing.T, s idempotency.Store) {
	mustClaim(t, s, "m1", "owner-a", medium, idempotency.Acquired)
	mustClaim(t, s, "m1", "owner-b", long, idempotency.Busy)
	time.Sleep(wait)
	mustClaim(t, s, "m1", "owner-b", long, idempotency.Acquired)
	wantErr(t, "Complete by expired owner", s.Complete(ctx(t), "m1", "owner-a", long), idempotency.ErrLeaseLost)
	wantErr(t, "Release by expired owner", s.Release(ctx(t), "m1", "owner-a"), idempotency.ErrLeaseLost)
	wantErr(t, "MarkSent by expired owner", s.MarkSent(ctx(t), "m1", "owner-a", "r"), idempotency.ErrLeaseLost)
	wantErr(t, "Complete by new owner", s.Complete(ctx(t), "m1", "owner-b", long), nil)

	// An expired lease with nobody taking over is lost too.
	mustClaim(t, s, "m2", "owner-a", short, idempotency.Acquired)
	time.Sleep(pause)
	wantErr(t, "Complete after expiry", s.Complete(ctx(t), "m2", "owner-a", long), idempotency.ErrLeaseLost)
	mustClaim(t, s, "m2", "owner-b", long, idempotency.Acquired)
}

func testDoneExpires(t *testing.T, s idempotency.Store) {
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Acquired)
	wantErr(t, "Complete", s.Complete(ctx(t), "m1", "owner-a", medium), nil)
	mustClaim(t, s, "m1", "owner-b", long, idempotency.Done)
	time.Sleep(wait)
	mustClaim(t, s, "m1", "owner-b", long, idempotency.Acquired)
}

func testSent(t *testing.T, s idempotency.Store) {
	wantSent(t, s, "m1", "device-a", false)
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Acquired)
	wantErr(t, "MarkSent", s.MarkSent(ctx(t), "m1", "owner-a", "device-a"), nil)
	wantErr(t, "MarkSent again", s.MarkSent(ctx(t), "m1", "owner-a", "device-a"), nil)
	wantSent(t, s, "m1", "device-a", true)
	wantSent(t, s, "m1", "device-b", false)
	wantSent(t, s, "m2", "device-a", false)
	wantErr(t, "Release", s.Release(ctx(t), "m1", "owner-a"), nil)
	wantSent(t, s, "m1", "device-a", true) // progress outlives the lease
	wantErr(t, "MarkSent after release", s.MarkSent(ctx(t), "m1", "owner-a", "device-b"), idempotency.ErrLeaseLost)
	wantSent(t, s, "m1", "device-b", false)
}

func testSentSurvivesTakeover(t *testing.T, s idempotency.Store) {
	mustClaim(t, s, "m1", "owner-a", medium, idempotency.Acquired)
	wantErr(t, "MarkSent", s.MarkSent(ctx(t), "m1", "owner-a", "device-a"), nil)
	time.Sleep(wait) // owner-a dies holding the lease
	mustClaim(t, s, "m1", "owner-b", long, idempotency.Acquired)
	wantSent(t, s, "m1", "device-a", true)
	wantSent(t, s, "m1", "device-b", false)
	wantErr(t, "MarkSent by new owner", s.MarkSent(ctx(t), "m1", "owner-b", "device-b"), nil)
	wantSent(t, s, "m1", "device-b", true)
}

func testSentExpires(t *testing.T, s idempotency.Store) {
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Acquired)
	wantErr(t, "MarkSent", s.MarkSent(ctx(t), "m1", "owner-a", "device-a"), nil)
	time.Sleep(wait)
	wantSent(t, s, "m1", "device-a", false)
	// A fresh set after expiry holds only what was added since.
	wantErr(t, "MarkSent after expiry", s.MarkSent(ctx(t), "m1", "owner-a", "device-b"), nil)
	wantSent(t, s, "m1", "device-b", true)
	wantSent(t, s, "m1", "device-a", false)
}

func testConcurrentClaims(t *testing.T, s idempotency.Store) {
	const n = 8
	results := make([]idempotency.ClaimResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Claim(ctx(t), "m1", fmt.Sprintf("owner-%d", i), long)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Claim %d: %v", i, errs[i])
		}
		switch results[i] {
		case idempotency.Acquired:
			if winner >= 0 {
				t.Fatalf("owners %d and %d both acquired the lease", winner, i)
			}
			winner = i
		case idempotency.Busy:
		default:
			t.Fatalf("Claim %d = %s, want ACQUIRED or BUSY", i, results[i])
		}
	}
	if winner < 0 {
		t.Fatal("no claim acquired the lease")
	}
	wantErr(t, "Complete by winner", s.Complete(ctx(t), "m1", fmt.Sprintf("owner-%d", winner), long), nil)
}

func testInvalidArguments(t *testing.T, s idempotency.Store) {
	c := ctx(t)
	_, err := s.Claim(c, "", "owner", long)
	wantErr(t, "Claim empty key", err, idempotency.ErrInvalidArgument)
	_, err = s.Claim(c, "m1", "", long)
	wantErr(t, "Claim empty owner", err, idempotency.ErrInvalidArgument)
	_, err = s.Claim(c, "m1", idempotency.DoneValue, long)
	wantErr(t, "Claim owner done", err, idempotency.ErrInvalidArgument)
	_, err = s.Claim(c, "m1", "owner", 0)
	wantErr(t, "Claim zero TTL", err, idempotency.ErrInvalidArgument)
	wantErr(t, "Complete zero TTL", s.Complete(c, "m1", "owner", 0), idempotency.ErrInvalidArgument)
	wantErr(t, "Complete owner done", s.Complete(c, "m1", idempotency.DoneValue, long), idempotency.ErrInvalidArgument)
	wantErr(t, "Release owner done", s.Release(c, "m1", idempotency.DoneValue), idempotency.ErrInvalidArgument)
	wantErr(t, "MarkSent empty owner", s.MarkSent(c, "m1", "", "r"), idempotency.ErrInvalidArgument)
	_, err = s.WasSent(c, "", "r")
	wantErr(t, "WasSent empty key", err, idempotency.ErrInvalidArgument)
	// Nothing was written by the refused calls.
	mustClaim(t, s, "m1", "owner", long, idempotency.Acquired)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Claim(cancelled, "m2", "owner", long); err == nil {
		t.Fatal("Claim with a cancelled context succeeded")
	}
}

func testKeysIndependent(t *testing.T, s idempotency.Store) {
	mustClaim(t, s, "m1", "owner-a", long, idempotency.Acquired)
	mustClaim(t, s, "m2", "owner-a", long, idempotency.Acquired)
	wantErr(t, "Complete m1", s.Complete(ctx(t), "m1", "owner-a", long), nil)
	mustClaim(t, s, "m2", "owner-b", long, idempotency.Busy)
	// Keys with characters that matter to Redis Cluster hash tags stay distinct.
	mustClaim(t, s, "a}b", "owner-a", long, idempotency.Acquired)
	mustClaim(t, s, "a{b", "owner-a", long, idempotency.Acquired)
	mustClaim(t, s, "a", "owner-a", long, idempotency.Acquired)
	wantErr(t, "MarkSent a}b", s.MarkSent(ctx(t), "a}b", "owner-a", "r"), nil)
	wantSent(t, s, "a}b", "r", true)
	wantSent(t, s, "a", "r", false)
}
