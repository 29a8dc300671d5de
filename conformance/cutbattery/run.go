package cutbattery

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
)

// armWait is how long an armed cut waits for its handler call before it cuts mid-stream.
const armWait = 3 * time.Second

// Run runs the battery against target, logs the counts line and one line per cut, and fails t
// on every broken rule (see the package documentation). It returns what it measured.
func Run(t *testing.T, target Target, opts Options) Result {
	t.Helper()
	res, problems := Measure(t, target, opts)
	t.Log(res.CountsLine(res.Bound))
	for _, p := range problems {
		t.Error(p)
	}
	return res
}

// Measure runs the battery like Run and returns the result and the broken rules instead of
// failing t on them (set-up failures still fail t). A test of a deliberately broken target
// uses it to check that the battery catches the defect.
func Measure(t *testing.T, target Target, opts Options) (Result, []string) {
	t.Helper()
	opts = opts.withDefaults()
	start := time.Now()
	proxies := startProxies(t, target.Upstreams(t))
	addrs := make([]string, len(proxies))
	for i, p := range proxies {
		addrs[i] = p.Addr()
	}
	topic := opts.TopicName(fmt.Sprintf("cutbattery.%s.%08x", strings.NewReplacer("/", "-", " ", "-").Replace(target.Name()), rand.Uint32()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sys, err := target.Connect(ctx, t, topic, addrs)
	cancel()
	if err != nil {
		t.Fatalf("cutbattery: %s: Connect: %v", target.Name(), err)
	}
	checkSystem(t, sys)
	var closeAdapter sync.Once
	t.Cleanup(func() { closeAdapter.Do(func() { _ = sys.Adapter.Close() }) })

	led := newLedger(opts.MaxAttempts)
	r, err := router.New(router.Config{
		Adapter:      sys.Adapter,
		Policy:       millrace.RetryPolicy{MaxAttempts: opts.MaxAttempts, Backoff: millrace.Fixed(opts.Delay)},
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
		CloseTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("cutbattery: router.New: %v", err)
	}
	for _, mw := range sys.Middleware {
		r.Watermill().AddMiddleware(mw)
	}
	for i := range opts.Handlers {
		r.Handle(fmt.Sprintf("cutbattery-%d", i+1), topic, led.handle)
	}

	dlCtx, dlCancel := context.WithCancel(context.Background())
	defer dlCancel()
	dls, err := subscribeDeadLetters(dlCtx, sys.DeadLetters, sys.Adapter.DeadLetterTopic(topic))
	if err != nil {
		t.Fatalf("cutbattery: subscribe to the dead letters of %q: %v", topic, err)
	}
	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	routerDone := make(chan error, 1)
	go func() { routerDone <- r.Run(runCtx) }()
	select {
	case <-r.Running():
	case err := <-routerDone:
		t.Fatalf("cutbattery: router stopped before running: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("cutbattery: router not running after 30s")
	}

	var problems []string
	var pmu sync.Mutex
	problem := func(format string, args ...any) {
		pmu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		pmu.Unlock()
	}
	pub := &publisher{sys: sys, topic: topic, led: led, problem: problem}
	pubStop := pub.start(opts)

	cuts := make([]CutReport, 0, opts.Cuts)
	var lastRestore time.Time
	for i := range opts.Cuts {
		time.Sleep(opts.Gap)
		rep, restoredAt := cutOnce(t, proxies, led, pub, opts, i, sys.Bound)
		cuts = append(cuts, rep)
		lastRestore = restoredAt
	}
	pubStop()

	// Every message must finish: succeed or be dead-lettered.
	deadline := lastRestore.Add(sys.Bound.Settle + opts.Timeout)
	for !allFinished(led, dls) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	// Give the consumer its settling time, then watch for late duplicates.
	time.Sleep(time.Until(lastRestore.Add(sys.Bound.Settle)))
	for {
		_, _, _, lastCall := led.snapshot()
		_, _, lastDL := dls.snapshot()
		quietFor := time.Since(later(lastCall, lastDL))
		if quietFor >= opts.Quiet || time.Now().After(deadline) {
			break
		}
		time.Sleep(opts.Quiet - quietFor)
	}

	runCancel()
	_ = r.Close()
	<-routerDone
	dlCancel()
	_ = sys.DeadLetters.Close()
	<-dls.done
	// The adapter stays open: it may still flush acknowledgements, and an in-process broker
	// keeps its state only while open. Nothing consumes any more.
	time.Sleep(time.Second)
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	pending, err := sys.Pending(pctx, topic)
	pcancel()
	if err != nil {
		problem("Pending(%q): %v", topic, err)
	}
	closeAdapter.Do(func() {
		if err := sys.Adapter.Close(); err != nil {
			t.Logf("cutbattery: close adapter: %v", err)
		}
	})
	for _, p := range proxies {
		p.Close()
	}

	sent, calls, _, _ := led.snapshot()
	recs, decodeErrs, _ := dls.snapshot()
	res := judge(sent, calls, recs, opts.MaxAttempts)
	res.Target = target.Name()
	res.Bound = sys.Bound
	res.Cuts = cuts
	res.Pending = pending
	for _, c := range cuts {
		res.MaxResume = max(res.MaxResume, c.Resume)
	}
	res.Proxies = sumStats(proxies)
	res.Elapsed = time.Since(start)
	for _, err := range decodeErrs {
		res.Problems = append(res.Problems, fmt.Sprintf("undecodable dead letter: %v", err))
	}
	res.Problems = append(res.Problems, problems...)
	extra := 0
	if sys.ExtraDuplicates != nil {
		extra = sys.ExtraDuplicates()
	}
	for i, c := range cuts {
		t.Logf("cutbattery %s: cut %d: %s for %s on %s; resumed %s after Restore; proxy: %s",
			res.Target, i+1, c.Kind, c.Length, c.Landed, resumeText(c), proxyText(c.Proxy))
	}
	if sys.Report != nil {
		t.Logf("cutbattery %s: %s", res.Target, sys.Report(res))
	}
	return res, res.violations(sys.Bound, extra)
}

func startProxies(t *testing.T, upstreams []string) []*Proxy {
	t.Helper()
	if len(upstreams) == 0 {
		t.Fatal("cutbattery: the target lists no upstream to cut")
	}
	out := make([]*Proxy, len(upstreams))
	for i, up := range upstreams {
		p, err := NewProxy(up)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		out[i] = p
	}
	return out
}

// checkSystem refuses a System with a required field missing, naming it.
func checkSystem(t *testing.T, s System) {
	t.Helper()
	for name, missing := range map[string]bool{
		"Adapter": s.Adapter == nil, "Publisher": s.Publisher == nil,
		"DeadLetters": s.DeadLetters == nil, "Pending": s.Pending == nil,
	} {
		if missing {
			t.Fatalf("cutbattery: System.%s is required", name)
		}
	}
	if s.Bound.Resume <= 0 {
		t.Fatalf("cutbattery: System.Bound.Resume must be positive, got %s", s.Bound.Resume)
	}
}

// cutOnce makes cut i: arms it for its landing, cuts every proxy when the handler call comes
// (or mid-stream after armWait), restores after the cut's length, publishes a probe and waits
// for it.
func cutOnce(t *testing.T, proxies []*Proxy, led *ledger, pub *publisher, opts Options, i int, b Bound) (CutReport, time.Time) {
	kind, length := opts.kind(i), opts.length(i)
	before := sumStats(proxies)
	var cutAt time.Time
	var landed landing
	a := &arm{spot: landings[i%len(landings)], fired: make(chan struct{})}
	a.fire = func() {
		cutAt = time.Now()
		for _, p := range proxies {
			p.Cut(kind)
		}
	}
	led.setArm(a)
	select {
	case <-a.fired:
		landed = a.spot
	case <-time.After(armWait):
		led.setArm(nil)
		landed = midStream
		a.once.Do(func() { a.fire(); close(a.fired) })
		<-a.fired // the handler may have fired it in between: then it landed where it was armed
		if a.byHandler.Load() {
			landed = a.spot
		}
	}
	time.Sleep(time.Until(cutAt.Add(length)))
	for _, p := range proxies {
		p.Restore()
	}
	restoredAt := time.Now()
	rep := CutReport{Kind: kind, Landed: string(landed), Length: time.Since(cutAt)}
	probe := pub.probe(i)
	if probe != "" {
		select {
		case <-led.probeSeen(probe):
			rep.Resumed = true
			_, calls, _, _ := led.snapshot()
			rep.Resume = calls[probe][0].start.Sub(restoredAt)
		case <-time.After(b.Resume + 30*time.Second):
		}
	}
	rep.Proxy = sumStats(proxies).minus(before)
	return rep, restoredAt
}

// allFinished reports whether every published message succeeded or was dead-lettered.
func allFinished(led *ledger, dls *deadLetterLog) bool {
	sent, calls, _, _ := led.snapshot()
	dead := dls.has()
	for uuid := range sent {
		if dead[uuid] {
			continue
		}
		ok := false
		for _, c := range calls[uuid] {
			if c.result == resultSuccess {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func sumStats(ps []*Proxy) ProxyStats {
	var s ProxyStats
	for _, p := range ps {
		st := p.Stats()
		s.Accepted += st.Accepted
		s.Reset += st.Reset
		s.BlackHoled += st.BlackHoled
		s.ClientsGaveUp += st.ClientsGaveUp
		s.SlowestGiveUp = max(s.SlowestGiveUp, st.SlowestGiveUp)
		s.StillSilent += st.StillSilent
		s.DialErrors += st.DialErrors
	}
	return s
}

// minus returns the change from before to s; SlowestGiveUp and StillSilent stay as they are.
func (s ProxyStats) minus(before ProxyStats) ProxyStats {
	s.Accepted -= before.Accepted
	s.Reset -= before.Reset
	s.BlackHoled -= before.BlackHoled
	s.ClientsGaveUp -= before.ClientsGaveUp
	s.DialErrors -= before.DialErrors
	return s
}

func resumeText(c CutReport) string {
	if !c.Resumed {
		return "NEVER (probe not handled)"
	}
	return c.Resume.Round(time.Millisecond).String()
}

func proxyText(s ProxyStats) string {
	return fmt.Sprintf("%d connections accepted, %d reset, %d black-holed (clients closed %d, slowest after %s; %d still silent)",
		s.Accepted, s.Reset, s.BlackHoled, s.ClientsGaveUp, s.SlowestGiveUp.Round(time.Millisecond), s.StillSilent)
}

// publisher publishes the workload over the System's uncut connection.
type publisher struct {
	sys     System
	topic   string
	led     *ledger
	problem func(string, ...any)
	copies  sync.WaitGroup
}

// start publishes one message every opts.PublishEvery until the returned stop is called; stop
// waits for the republished copies too.
func (p *publisher) start(opts Options) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(opts.PublishEvery)
		defer tick.Stop()
		oks := 0
		for n := 0; ; n++ {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			kind := kindOf(n)
			msg := p.led.newMessage(n, kind)
			if !p.publish(msg) {
				continue
			}
			if kind == kindOK {
				oks++
				if opts.RepublishEvery > 0 && oks%opts.RepublishEvery == 0 {
					p.republish(msg)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		p.copies.Wait()
	}
}

// publish sends msg; a failure is a problem of the run (the connection is never cut).
func (p *publisher) publish(msg *message.Message) bool {
	if err := p.sys.Publisher.Publish(p.topic, msg); err != nil {
		p.led.unsend(msg.UUID)
		p.problem("publish %s over the uncut connection: %v", msg.UUID, err)
		return false
	}
	return true
}

// republish sends a copy of msg (same UUID, payload and metadata) half a second later.
func (p *publisher) republish(msg *message.Message) {
	cp := message.NewMessage(msg.UUID, append([]byte(nil), msg.Payload...))
	cp.Metadata = maps.Clone(msg.Metadata)
	p.copies.Add(1)
	time.AfterFunc(500*time.Millisecond, func() {
		defer p.copies.Done()
		if err := p.sys.Publisher.Publish(p.topic, cp); err != nil {
			p.problem("republish %s over the uncut connection: %v", cp.UUID, err)
		}
	})
}

// probe publishes the probe of cut i and returns its UUID ("" if the publish failed).
func (p *publisher) probe(i int) string {
	msg := p.led.newMessage(-1-i, kindProbe)
	if !p.publish(msg) {
		return ""
	}
	return msg.UUID
}
