package killbattery

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Run runs the kill battery on one adapter. In the test process it is the parent: it publishes
// the workload in batches, starts a consumer child per batch and SIGKILLs it at a random
// moment, Options.Kills times, lets a last child settle everything, stops it with SIGTERM, then
// checks the ledger and the dead letters against the Target's Bound and logs one counts line.
// In a child (the same test binary, re-executed for this test only) it is the consumer; it
// never returns there: once SIGTERM stopped the consumer it ends the child's test with Skip, so
// code after Run runs in the parent only.
//
// Call it from a test function (or subtest) of its own, after the check that skips the test,
// or fails it in CI, when the broker is unreachable. Everything the test does before Run also
// runs in every child, so it must not delete broker state when it ends.
func Run(t testing.TB, tg Target, opts Options) {
	t.Helper()
	spec, isChild, err := childSpecFor(t)
	if err != nil {
		t.Fatal(err)
	}
	if isChild {
		runChild(t, tg, spec)
		// The consumer stopped on SIGTERM. End the child's test here, so that what the test
		// does after Run (its own checks) runs in the parent only.
		t.Skip("killbattery child: the consumer stopped")
	}
	if os.Getenv(ChildEnv) != "" {
		t.Skipf("killbattery: this process is the battery child of %s", spec.Test)
	}
	o, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b := newBattery(t, tg, o)
	b.exercise()
	r := check(b.observe(), tg.Bound())
	t.Logf("%s, took %s", r.line(t.Name(), o.Seed, tg.Bound()), time.Since(start).Round(100*time.Millisecond))
	for _, v := range r.violations {
		t.Error(v)
	}
	if len(r.violations) > 0 {
		t.Errorf("killbattery: replay with %s=%d; the ledger and the child logs are kept in %s", SeedEnv, o.Seed, b.dir)
	}
}

// battery is the parent's state for one Run.
type battery struct {
	t      testing.TB
	tg     Target
	o      Options
	rng    *rand.Rand
	ctx    context.Context
	dir    string
	topic  string
	policy millrace.RetryPolicy
	a      millrace.Adapter
	dls    *collector
	ledger string
	work   []work
	killed map[int]bool
	last   *child
}

func newBattery(t testing.TB, tg Target, o Options) *battery {
	t.Helper()
	b := &battery{
		t: t, tg: tg, o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x6b696c6c)),
		ctx: context.Background(), killed: map[int]bool{},
		policy: millrace.RetryPolicy{MaxAttempts: o.MaxAttempts, Backoff: millrace.Fixed(o.Delay)},
	}
	// Not t.TempDir: the ledger and the child logs are kept when the test fails, to read them.
	dir, err := os.MkdirTemp("", "killbattery-")
	if err != nil {
		t.Fatal(err)
	}
	b.dir = dir
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	t.Logf("kill battery seed %d (replay with %s=%d)", o.Seed, SeedEnv, o.Seed)
	name := strings.NewReplacer("/", "-", " ", "-").Replace(strings.ToLower(t.Name()))
	b.topic = o.TopicName(fmt.Sprintf("killbattery.%s.%08x", name, b.rng.Uint32()))
	b.ledger = filepath.Join(b.dir, "ledger")
	if err := os.WriteFile(b.ledger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := tg.NewAdapter(b.ctx)
	if err != nil {
		t.Fatalf("killbattery: NewAdapter: %v", err)
	}
	b.a = a
	t.Cleanup(func() {
		_ = a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tg.Cleanup(ctx, a, b.topic); err != nil {
			t.Logf("killbattery: clean-up of %s: %v", b.topic, err)
		}
	})
	if err := a.Provision(b.ctx, b.topic, b.policy); err != nil {
		t.Fatalf("killbattery: Provision %s: %v", b.topic, err)
	}
	sub, err := tg.DeadLetterSubscriber(b.ctx, a)
	if err != nil {
		t.Fatalf("killbattery: DeadLetterSubscriber: %v", err)
	}
	if b.dls, err = collectDeadLetters(sub, a.DeadLetterTopic(b.topic)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.dls.close)
	b.work = newWorkload(o.Messages, b.rng)
	return b
}

// exercise publishes a batch before each child, kills Options.Kills children, and lets the
// last one run until every message is settled.
func (b *battery) exercise() {
	parts := batches(b.work, b.o.Kills+1)
	calls, err := tailLedger(b.ledger)
	if err != nil {
		b.t.Fatal(err)
	}
	defer calls.close()
	for i := range b.o.Kills {
		b.publish(parts[i])
		c := b.start(i)
		b.killAtRandom(c, calls, len(parts[i]))
	}
	b.publish(parts[b.o.Kills])
	b.last = b.start(b.o.Kills)
	b.settle()
	if err := b.last.stop(30 * time.Second); err != nil {
		b.t.Errorf("%v; its log:\n%s", err, tail(b.last.log, 40))
	}
}

func (b *battery) publish(ws []work) {
	if len(ws) == 0 {
		return
	}
	msgs := make([]*message.Message, len(ws))
	for i, w := range ws {
		msgs[i] = w.message()
	}
	if err := b.a.Publisher().Publish(b.topic, msgs...); err != nil {
		b.t.Fatalf("killbattery: publish to %s: %v", b.topic, err)
	}
}

func (b *battery) start(i int) *child {
	spec := childSpec{
		Test: b.t.Name(), Topic: b.topic, Ledger: b.ledger,
		MaxAttempts: b.o.MaxAttempts, Delay: b.o.Delay, HandlerSleep: b.o.HandlerSleep,
	}
	c, err := startChild(spec, filepath.Join(b.dir, fmt.Sprintf("child-%02d.log", i)))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { c.kill() })
	return c
}

// killAtRandom kills c at a moment drawn from rng. Half the kills come after the child's k-th
// handler call, k drawn from [1, 2n] for a batch of n (or after a random part of
// Options.Lifetime if that comes first), so that they hit a busy consumer; the others at a
// random moment of Options.Lifetime, so that some children live long enough to take over the
// retries and the recovered messages of those killed before them, and some die while starting.
// A random pause of up to HandlerSleep follows, so that kills land during calls and between a
// call's end and its ack.
func (b *battery) killAtRandom(c *child, calls *ledgerTail, n int) {
	k := 1 + b.rng.IntN(2*max(n, 1))
	if b.rng.IntN(2) == 0 {
		k = math.MaxInt - 1 // kill by time only
	}
	deadline := time.Now().Add(time.Duration(b.rng.Int64N(int64(b.o.Lifetime) + 1)))
	pause := time.Duration(b.rng.Int64N(int64(b.o.HandlerSleep) + 1))
	base, err := calls.started()
	if err != nil {
		b.t.Fatal(err)
	}
	for time.Now().Before(deadline) {
		got, err := calls.started()
		if err != nil {
			b.t.Fatal(err)
		}
		if got >= base+k {
			break
		}
		select {
		case <-c.done:
			b.t.Fatal(c.exitedEarly())
		case <-time.After(2 * time.Millisecond):
		}
	}
	time.Sleep(pause)
	if !c.kill() {
		b.t.Fatal(c.exitedEarly())
	}
	b.killed[c.pid()] = true
	if err := childTrouble(c.log); err != nil {
		b.t.Error(err)
	}
}

// settleQuiet is how long the ledger and the dead letters must stay unchanged before the last
// child counts as done: Pending may not see what a consumer holds unacknowledged (a RabbitMQ
// passive declare counts ready messages only), so a redelivery the child has prefetched but not
// yet handled must show up as a call first.
const settleQuiet = time.Second

// settle waits until every message has a successful call or a dead letter, the broker holds
// nothing more of the topic and nothing has happened for settleQuiet, at most
// Options.SettleTimeout (then the checks report what is missing).
func (b *battery) settle() {
	deadline := time.Now().Add(b.o.SettleTimeout)
	lastSeen, lastChange := -1, time.Now()
	for {
		unsettled, pending, seen, err := b.progress()
		if seen != lastSeen {
			lastSeen, lastChange = seen, time.Now()
		}
		if err == nil && unsettled == 0 && pending == 0 && time.Since(lastChange) >= settleQuiet {
			return
		}
		if time.Now().After(deadline) {
			b.t.Errorf("killbattery: after %s, %d messages are unsettled and the broker holds %d (last error: %v)", b.o.SettleTimeout, unsettled, pending, err)
			return
		}
		select {
		case <-b.last.done:
			b.t.Fatal(b.last.exitedEarly())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// progress returns how many messages have neither a successful call nor a dead letter yet,
// what the broker still holds, and how much the battery has seen (ledger bytes plus dead
// letters), which grows with every event.
func (b *battery) progress() (unsettled, pending, seen int, err error) {
	data, err := os.ReadFile(b.ledger)
	if err != nil {
		return 0, 0, 0, err
	}
	calls, err := parseLedger(data)
	if err != nil {
		return 0, 0, 0, err
	}
	settled := map[string]bool{}
	for _, c := range calls {
		if c.outcome == outcomeSuccess {
			settled[c.uuid] = true
		}
	}
	recs, _ := b.dls.snapshot()
	for _, r := range recs {
		settled[r.UUID] = true
	}
	for _, w := range b.work {
		if !settled[w.uuid] {
			unsettled++
		}
	}
	pending, err = b.tg.Pending(b.ctx, b.a, b.topic)
	return unsettled, pending, len(data) + len(recs), err
}

// observe gathers what the checks need once the last child has stopped: the dead letters get
// a moment to arrive, the broker is asked what it still holds.
func (b *battery) observe() observation {
	time.Sleep(500 * time.Millisecond)
	if err := childTrouble(b.last.log); err != nil {
		b.t.Error(err)
	}
	data, err := os.ReadFile(b.ledger)
	if err != nil {
		b.t.Fatal(err)
	}
	calls, err := parseLedger(data)
	if err != nil {
		b.t.Fatal(err)
	}
	pending, err := b.tg.Pending(b.ctx, b.a, b.topic)
	if err != nil {
		b.t.Errorf("killbattery: Pending: %v", err)
	}
	recs, errs := b.dls.snapshot()
	return observation{
		topic: b.topic, maxAttempts: b.o.MaxAttempts, work: b.work, calls: calls,
		deadLetters: recs, undecodable: errs, killed: b.killed, pending: pending,
	}
}
