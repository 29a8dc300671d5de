package amqp_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
)

// TestKilledConsumerLosesNothing: a consumer process holding an unacknowledged message (and
// others prefetched) is killed with SIGKILL; a new consumer then gets every message, the held
// one included, exactly once each, and the queues end empty. The return is counted (quorum:
// x-delivery-count; classic: the redelivered flag): the held message arrives as attempt 2.
func TestKilledConsumerLosesNothing(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "crashconsumer")
	build := exec.Command("go", "build", "-o", bin, "./testdata/crashconsumer")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build crashconsumer: %v\n%s", err, out)
	}
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		ctx := context.Background()
		topic := uniqueTopic("crash")
		a := newAdapter(ctx, t, amqp.Config{QueueType: qt})
		policy := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)}
		if err := a.Provision(ctx, topic, policy); err != nil {
			t.Fatalf("provision: %v", err)
		}
		published := map[string]bool{}
		for i := range 5 {
			published[publishKey(t, a, topic, topic, fmt.Sprintf(`{"n":%d}`, i)).UUID] = true
		}

		child := exec.Command(bin, "-url", brokerURL(), "-topic", topic, "-queue-type", string(qt))
		stdout, err := child.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		child.Stderr = testWriter{t}
		if err := child.Start(); err != nil {
			t.Fatalf("start child: %v", err)
		}
		held := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "HOLDING" {
					held <- f[1]
				}
			}
		}()
		var heldUUID string
		select {
		case heldUUID = <-held:
		case <-time.After(30 * time.Second):
			_ = child.Process.Kill()
			t.Fatal("child never held a message")
		}
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL: %v", err)
		}
		_ = child.Wait()
		if !published[heldUUID] {
			t.Fatalf("child held %s, which was not published", heldUUID)
		}

		var rec recorder
		runRouter(t, a, topic, policy, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
			rec.add(msg, at)
			return nil
		})
		waitFor(t, 30*time.Second, "every message", func() bool { return len(rec.snapshot()) >= len(published) })
		time.Sleep(500 * time.Millisecond)
		calls := rec.snapshot()
		got := map[string]int{}
		for _, c := range calls {
			got[c.uuid]++
			if c.uuid != heldUUID {
				continue
			}
			if c.metadata.Get(amqp.MetadataRedelivered) != "true" {
				t.Errorf("held message not flagged redelivered: %v", c.metadata)
			}
			// The return is an attempt: x-delivery-count 1 on quorum queues, the redelivered
			// flag on classic ones.
			if c.attempt.Number != 2 {
				t.Errorf("held message: attempt %d, want 2", c.attempt.Number)
			}
		}
		for id := range published {
			if got[id] != 1 {
				t.Errorf("message %s handled %d times, want 1", id, got[id])
			}
		}
		if len(calls) != len(published) {
			t.Errorf("want %d handler calls, got %d", len(published), len(calls))
		}
		for _, q := range []string{topic, a.DeadLetterTopic(topic)} {
			if n := queueDepth(t, q); n != 0 {
				t.Errorf("queue %s holds %d messages, want 0", q, n)
			}
		}
	})
}

// testWriter sends a child's stderr to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
