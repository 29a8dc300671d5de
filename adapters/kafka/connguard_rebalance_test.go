package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
)

// A JoinGroup the broker holds while the group waits for a slow member is not a silent path:
// the connection guard condemns no connection for it. Member A's handler is busy for
// slowHandler when member B joins; the broker answers B's JoinGroup only once A rejoins, after
// its handler returns, far past the 2 s Net.ReadTimeout. Sarama (v1.61.1) gives JoinGroup no
// longer read deadline than any request, so B's JoinGroup times out in sarama, and B joins
// again; before the guard knew a group request, each such timeout closed every idle
// connection of B's clients to every broker.
func TestGuardIgnoresJoinGroupWaitingForASlowMember(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a slow handler; skipped with -short")
	}
	const readTimeout = 2 * time.Second
	const slowHandler = 4 * readTimeout
	group := uniqueName("millrace-guard-join")
	topic := uniqueName("guard-join")
	tweak := func(c *kafka.Config) {
		sc := sarama.NewConfig()
		sc.Net.ReadTimeout = readTimeout
		c.Sarama = sc
	}
	a := newAdapter(t, group, tweak)
	started := make(chan struct{}, 1)
	recA := newRecorder()
	startRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1}, recA,
		func(ctx context.Context, _ *message.Message, _ millrace.Attempt) error {
			select {
			case started <- struct{}{}:
			default:
			}
			time.Sleep(slowHandler)
			return nil
		})
	if err := a.Publisher().Publish(topic, newMessage(`{"slow":"member"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(waitTimeout):
		t.Fatal("member A never started the record")
	}
	sessionsA := a.Sessions()
	joined := time.Now()
	b := newAdapter(t, group, tweak)
	startRouter(t, b, topic, millrace.RetryPolicy{MaxAttempts: 1}, newRecorder(),
		func(context.Context, *message.Message, millrace.Attempt) error { return nil })
	deadline := time.Now().Add(waitTimeout + slowHandler)
	for a.Sessions() <= sessionsA || b.Sessions() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the group did not rebalance: A %d sessions (was %d), B %d", a.Sessions(), sessionsA, b.Sessions())
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(joined)
	recA.wait(t, "member A's record", func(c []call) bool { return len(c) >= 1 })
	t.Logf("rebalance took %s (Net.ReadTimeout %s); group requests timed out: A %d, B %d; guard trips: A %d, B %d",
		took.Round(time.Millisecond), readTimeout, a.GuardSpared(), b.GuardSpared(), a.GuardTrips(), b.GuardTrips())
	if took < 2*readTimeout {
		t.Fatalf("the rebalance took %s, not longer than the read timeout %s: the test proves nothing", took, readTimeout)
	}
	if a.GuardSpared()+b.GuardSpared() == 0 {
		t.Fatal("no JoinGroup or SyncGroup timed out: the test did not reach the case it is for")
	}
	if n := a.GuardTrips() + b.GuardTrips(); n != 0 {
		t.Fatalf("the guard condemned the idle connections %d times during a rebalance", n)
	}
}
