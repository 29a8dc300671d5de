package redisstream

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// TestKilledConsumerEntryIsReclaimed: a real consumer process takes an entry and is killed with
// SIGKILL while it holds it. A surviving consumer of the group reclaims the entry once it is due
// (idle for the policy delay of its delivery count), with the attempt number incremented.
func TestKilledConsumerEntryIsReclaimed(t *testing.T) {
	t.Parallel()
	testClient(t) // skip early when Redis is unreachable
	const (
		delay  = 800 * time.Millisecond
		budget = 300 * time.Millisecond
	)
	bin := filepath.Join(t.TempDir(), "holdconsumer")
	build := exec.Command("go", "build", "-o", bin, "./internal/holdconsumer")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build holdconsumer: %v\n%s", err, out)
	}

	cfg := testConfig()
	cfg.ProcessingBudget = budget
	survivor := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	msg := message.NewMessage("victim-message", []byte(`{"user":"u-1"}`))
	if err := survivor.Publisher().Publish(stream, msg); err != nil {
		t.Fatal(err)
	}

	child := exec.Command(bin, "-stream", stream, "-group", cfg.Group, "-delay", delay.String(), "-budget", budget.String())
	child.Env = append(os.Environ(), envURL+"="+redisURL())
	child.Stderr = t.Output()
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	held := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "HOLDING ") {
				held <- sc.Text()
			}
		}
	}()
	var line string
	select {
	case line = <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the child never took the message")
	}
	heldAt := time.Now()
	f := strings.Fields(line)
	if len(f) != 4 || f[1] != msg.UUID || f[2] != "1" {
		t.Fatalf("child says %q, want HOLDING %s 1 <entry id>", line, msg.UUID)
	}
	entryID := f[3]

	var calls atomic.Int32
	got := make(chan millrace.Attempt, 4)
	runRouter(t, survivor, stream, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(delay)}, budget,
		func(_ context.Context, m *message.Message, at millrace.Attempt) error {
			calls.Add(1)
			got <- at
			return nil
		})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	_ = child.Wait()

	select {
	case at := <-got:
		since := time.Since(heldAt)
		if at.Number != 2 || at.NativeCount != 2 || at.NativeID != entryID || at.Source != millrace.SourceNative {
			t.Fatalf("reclaimed delivery: %+v, want attempt 2 (native count 2) of entry %s", at, entryID)
		}
		if since < delay-50*time.Millisecond {
			t.Fatalf("reclaimed %s after the child took it, before its delay %s", since, delay)
		}
		t.Logf("reclaimed %s after the child took it (delay %s)", since, delay)
	case <-time.After(10 * time.Second):
		t.Fatal("the killed consumer's entry was never reclaimed")
	}
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("survivor handled the entry %d times, want 1", n)
	}
	if got := survivor.Stats().Recovered; got != 1 {
		t.Fatalf("Stats.Recovered %d, want 1", got)
	}
	c := testClient(t)
	waitUntil(t, "the PEL to empty", 5*time.Second, func() bool { return pendingCount(t, c, stream, cfg.Group) == 0 })
}
