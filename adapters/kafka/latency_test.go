package kafka_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/internal/benchround"
	"github.com/millrace/millrace/router"
)

var (
	latRates   = flag.String("kafka.latency.rates", "5000", "BenchmarkRetryLatency: offered records per second, comma-separated")
	latDelays  = flag.String("kafka.latency.delays", "1s,5s", "BenchmarkRetryLatency: retry delays, comma-separated")
	latRun     = flag.Duration("kafka.latency.run", 0, "BenchmarkRetryLatency: how long each run offers load (0: the delay plus 30 s)")
	latRounds  = flag.Int("kafka.latency.rounds", 3, "BenchmarkRetryLatency: rounds (each one all-healthy run and one failing run)")
	latSeries  = flag.Bool("kafka.latency.series", false, "BenchmarkRetryLatency: log each run's healthy latency per second of the run")
	latBuffer  = flag.Int("kafka.latency.buffer", 0, "BenchmarkRetryLatency: Sarama Consumer.ChannelBufferSize (0: Sarama's default, 256)")
	latFailPct = flag.Int("kafka.latency.failpct", 10, "BenchmarkRetryLatency: percent of records that fail once")
)

// BenchmarkRetryLatency measures what waiting retries cost the healthy records of the same
// consumer: records are offered at a fixed rate (-kafka.latency.rates, default 5,000/s) to a
// 3-partition topic for -kafka.latency.run (default the delay plus 30 s, so that retries come
// due while healthy records flow), and one record in ten fails once with a fixed retry delay
// (-kafka.latency.delays, default 1 s and 5 s). Each round runs the same load all healthy
// (A) and with the failures (B), A then B, each on a fresh topic and group; every run starts
// its consumer before offering load.
//
// It prints, per rate and delay, benchround lines (internal/benchround: min / median / max
// over the rounds), each figure named <figure>@<rate>/s,<delay>, e.g. p99_ratio@5000/s,1s:
//
//	p99_ratio             healthy-record p99 end-to-end latency (producer send to handler
//	                      call) of B over A's in the same round, over the whole run (<= 1.5)
//	p99_due_ratio         the same for records sent once retries were coming due (after the
//	                      first delay of the run), the window where a waiting retry can stall
//	                      healthy partitions
//	retry_late_p99_ratio  a retry's wait, its delay plus how long after its not-before time it
//	                      reached its handler (p99), over the delay (<= 1.1); _max_ the same
//	                      for the latest retry
//	consumed/offered      healthy records handled per second over the rate offered (B) (>= 1)
//	heap_peak             the largest live heap (after a GC) sampled during B, MiB
//
// and the runs' healthy p99 in ms (all_healthy, 10pct_failing).
// The machine's noise moves the absolute figures; the ratios compare runs seconds apart.
//
//	source .ci/services/kafka.sh
//	go test ./adapters/kafka/ -run '^$' -bench BenchmarkRetryLatency -benchtime 1x -timeout 60m \
//	    -kafka.latency.rates 5000 -kafka.latency.delays 1s,5s -kafka.latency.run 20s -kafka.latency.rounds 3
func BenchmarkRetryLatency(b *testing.B) {
	var rates []int
	for _, s := range strings.Split(*latRates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			b.Fatalf("-kafka.latency.rates: %q", s)
		}
		rates = append(rates, n)
	}
	var delays []time.Duration
	for _, s := range strings.Split(*latDelays, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			b.Fatalf("-kafka.latency.delays: %q", s)
		}
		delays = append(delays, d)
	}
	for range b.N {
		for _, rate := range rates {
			for _, delay := range delays {
				b.Run(fmt.Sprintf("rate=%d/delay=%s", rate, delay), func(b *testing.B) {
					latencyRounds(b, rate, delay)
				})
			}
		}
	}
}

// latencyRun is the outcome of one run.
type latencyRun struct {
	p99, p999, max  time.Duration // healthy records, whole run
	p99Due, maxDue  time.Duration // healthy records sent after the first delay
	lateP99, lateMx time.Duration // retries: handler call past their not-before time
	consumedPerSec  float64       // healthy records handled per second, from first send to last healthy record
	offeredPerSec   float64       // healthy records sent per second
	heapPeak        uint64        // largest live heap sampled
	retries         int
	// machineBusy is how many of the machine's cores were busy (not idle, not waiting for I/O)
	// on average while the load was offered, and processBusy how many of them this process
	// (consumer and load generator) kept busy: what is left of the machine for the broker
	// and everything else. 0 where /proc/stat cannot be read.
	machineBusy, processBusy float64
}

func latencyRounds(b *testing.B, rate int, delay time.Duration) {
	run := *latRun
	if run <= 0 {
		run = delay + 30*time.Second
	}
	runs := map[string][]latencyRun{}
	v := func(name string, failing bool) benchround.Variant {
		return benchround.Variant{Name: name, Run: func(b *testing.B) float64 {
			r := latencyOnce(b, rate, delay, run, failing)
			b.Logf("round %d %s: %s", len(runs[name]), name, r)
			runs[name] = append(runs[name], r)
			return r.p99.Seconds() * 1000
		}}
	}
	res := benchround.Interleave(b, *latRounds, v("all_healthy", false), v(fmt.Sprintf("%dpct_failing", *latFailPct), true))
	benchround.Report(b, res, "p99_ms")
	healthy, failing := runs["all_healthy"], runs[res.Names[1]]
	var ratio, ratioDue, late, lateMax, keep, heap, busyA, busyB, procA, procB []float64
	for i := range healthy {
		ratio = append(ratio, float64(failing[i].p99)/float64(healthy[i].p99))
		ratioDue = append(ratioDue, float64(failing[i].p99Due)/float64(healthy[i].p99Due))
		late = append(late, float64(delay+failing[i].lateP99)/float64(delay))
		lateMax = append(lateMax, float64(delay+failing[i].lateMx)/float64(delay))
		keep = append(keep, failing[i].consumedPerSec/failing[i].offeredPerSec)
		heap = append(heap, float64(failing[i].heapPeak)/(1<<20))
		busyA, busyB = append(busyA, healthy[i].machineBusy), append(busyB, failing[i].machineBusy)
		procA, procB = append(procA, healthy[i].processBusy), append(procB, failing[i].processBusy)
	}
	at := fmt.Sprintf("@%d/s,%s", rate, delay)
	for _, f := range []struct {
		name, unit, target string
		xs                 []float64
	}{
		{"p99_ratio", "ratio", "<= 1.5", ratio},
		{"p99_due_ratio", "ratio", "", ratioDue},
		{"retry_late_p99_ratio", "ratio", "<= 1.1", late},
		{"retry_late_max_ratio", "ratio", "", lateMax},
		{"consumed/offered", "ratio", ">= 0.99", keep}, // keeps up: the rate is measured over the run, so 1 exactly is not reached
		{"heap_peak", "MiB", "", heap},
		// Where the CPU went while the load was offered: the whole machine's busy cores and
		// this process's, in each run (see latencyRun.machineBusy).
		{"machine_busy_" + res.Names[0], "cores", "", busyA},
		{"machine_busy_" + res.Names[1], "cores", "", busyB},
		{"process_busy_" + res.Names[0], "cores", "", procA},
		{"process_busy_" + res.Names[1], "cores", "", procB},
	} {
		lo, med, hi := benchround.Stats(f.xs)
		fmt.Println(benchround.Line(b.Name(), f.name+at, f.unit, lo, med, hi, len(f.xs), f.target))
	}
	b.ReportMetric(median(ratio), "p99_ratio")
	b.ReportMetric(median(ratioDue), "p99_due_ratio")
	b.ReportMetric(median(late), "retry_late_p99_ratio")
	b.ReportMetric(median(keep), "consumed/offered")
}

func (r latencyRun) String() string {
	return fmt.Sprintf("healthy p99 %s p99.9 %s max %s; sent after the first delay: p99 %s max %s; retries %d late p99 %s max %s; healthy consumed %.0f/s of %.0f/s offered; heap peak %.1f MiB",
		r.p99.Round(100*time.Microsecond), r.p999.Round(100*time.Microsecond), r.max.Round(100*time.Microsecond),
		r.p99Due.Round(100*time.Microsecond), r.maxDue.Round(100*time.Microsecond),
		r.retries, r.lateP99.Round(time.Millisecond), r.lateMx.Round(time.Millisecond),
		r.consumedPerSec, r.offeredPerSec, float64(r.heapPeak)/(1<<20))
}

// latSample is one healthy record's latency and when it was sent.
type latSample struct {
	sent    int64 // unix nanos
	latency time.Duration
}

// latencyOnce runs one rate for run: a consumer (a millrace router, transactional, defaults)
// started first, then records offered at rate for run, and waits for every healthy record and
// every retry.
func latencyOnce(b *testing.B, rate int, delay, run time.Duration, failing bool) latencyRun {
	a := newAdapter(b, "", func(c *kafka.Config) {
		c.Partitions = benchPartitions
		c.Logger = slog.New(slog.DiscardHandler)
		if *latBuffer > 0 {
			sc := sarama.NewConfig()
			sc.Version = sarama.V2_8_0_0
			sc.ChannelBufferSize = *latBuffer
			c.Sarama = sc
		}
	})
	defer a.Close()
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(delay)}
	topic := uniqueName("latency")
	if err := a.Provision(ctxT(b, 30*time.Second), topic, policy); err != nil {
		b.Fatal(err)
	}
	failEvery := 0
	if failing && *latFailPct > 0 {
		failEvery = 100 / *latFailPct
	}

	var (
		mu       sync.Mutex
		samples  = make([]latSample, 0, int(float64(rate)*run.Seconds())+16)
		lates    []time.Duration
		healthyN atomic.Int64
		retryN   atomic.Int64
		lastAt   atomic.Int64
	)
	r, err := router.New(router.Config{Adapter: a, Policy: policy, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	warm := make(chan struct{}, 16)
	r.Handle("latency", topic, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		now := time.Now()
		if msg.Metadata.Get("warmup") != "" {
			warm <- struct{}{}
			return nil
		}
		i, _ := strconv.Atoi(msg.Metadata.Get("i"))
		if failEvery > 0 && i%failEvery == 0 {
			if at.Number == 1 {
				return errors.New("transient")
			}
			late := now.Sub(millrace.NotBeforeFromHeaders(msg.Metadata))
			mu.Lock()
			lates = append(lates, late)
			mu.Unlock()
			retryN.Add(1)
			return nil
		}
		sent, _ := strconv.ParseInt(msg.Metadata.Get("t"), 10, 64)
		mu.Lock()
		samples = append(samples, latSample{sent: sent, latency: now.Sub(time.Unix(0, sent))})
		mu.Unlock()
		healthyN.Add(1)
		lastAt.Store(now.UnixNano())
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); _ = r.Close(); <-done }()
	select {
	case <-r.Running():
	case err := <-done:
		b.Fatalf("router stopped: %v", err)
	}

	// The load: records keyed by their index (spread over the partitions), sent through an
	// async producer paced every 2 ms.
	pc := sarama.NewConfig()
	pc.Version = sarama.V2_8_0_0
	pc.Producer.RequiredAcks = sarama.WaitForLocal
	pc.Producer.Return.Errors = true
	pc.Producer.Flush.Frequency = time.Millisecond
	pc.Producer.Partitioner = func(topic string) sarama.Partitioner {
		return warmupPartitioner{hash: sarama.NewHashPartitioner(topic), manual: sarama.NewManualPartitioner(topic)}
	}
	prod, err := sarama.NewAsyncProducer(brokers(b), pc)
	if err != nil {
		b.Fatal(err)
	}
	var prodErr atomic.Value
	go func() {
		for e := range prod.Errors() {
			prodErr.Store(e.Err)
		}
	}()
	// A warm-up record per partition, handled before the load starts: the group has joined
	// and every claim runs.
	for p := range benchPartitions {
		prod.Input() <- &sarama.ProducerMessage{Topic: topic, Partition: int32(p), Value: sarama.StringEncoder("{}"),
			Headers: []sarama.RecordHeader{{Key: []byte("warmup"), Value: []byte("1")}}}
	}
	for range benchPartitions {
		select {
		case <-warm:
		case <-time.After(time.Minute):
			b.Fatal("warm-up records not handled within a minute")
		}
	}
	heapStop := make(chan struct{})
	heapDone := make(chan uint64)
	go func() { heapDone <- sampleHeap(heapStop) }()

	machine0, proc0 := machineCPU(), processCPU()
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	sent := 0
	for now := range tick.C {
		elapsed := now.Sub(start)
		if elapsed >= run {
			break
		}
		for want := int(elapsed.Seconds() * float64(rate)); sent < want; sent++ {
			k := strconv.Itoa(sent)
			prod.Input() <- &sarama.ProducerMessage{
				Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(`{"n":` + k + `}`),
				Headers: []sarama.RecordHeader{
					{Key: []byte("i"), Value: []byte(k)},
					{Key: []byte("t"), Value: strconv.AppendInt(nil, time.Now().UnixNano(), 10)},
				},
			}
		}
	}
	tick.Stop()
	sendEnd := time.Now()
	machine1, proc1 := machineCPU(), processCPU()
	_ = prod.Close()
	if err, _ := prodErr.Load().(error); err != nil {
		b.Fatalf("producing: %v", err)
	}
	wantHealthy, wantRetries := int64(sent), int64(0)
	if failEvery > 0 {
		wantRetries = int64((sent + failEvery - 1) / failEvery)
		wantHealthy -= wantRetries
	}
	deadline := time.Now().Add(delay + 2*time.Minute)
	for healthyN.Load() < wantHealthy || retryN.Load() < wantRetries {
		if time.Now().After(deadline) {
			b.Fatalf("after %s: %d of %d healthy records, %d of %d retries", time.Since(sendEnd).Round(time.Second),
				healthyN.Load(), wantHealthy, retryN.Load(), wantRetries)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(heapStop)
	out := latencyRun{heapPeak: <-heapDone, retries: int(wantRetries)}
	wall := sendEnd.Sub(start)
	out.processBusy = float64(proc1-proc0) / float64(wall.Nanoseconds())
	if machine0.total > 0 && machine1.total > machine0.total {
		busy, total := float64(machine1.busy-machine0.busy), float64(machine1.total-machine0.total)
		out.machineBusy = busy / total * float64(machine1.cores)
	}
	out.offeredPerSec = float64(wantHealthy) / wall.Seconds()
	out.consumedPerSec = float64(wantHealthy) / time.Duration(lastAt.Load()-start.UnixNano()).Seconds()

	mu.Lock()
	defer mu.Unlock()
	lats := make([]time.Duration, len(samples))
	var due []time.Duration
	dueFrom := start.Add(delay).UnixNano()
	for i, s := range samples {
		lats[i] = s.latency
		if s.sent >= dueFrom {
			due = append(due, s.latency)
		}
	}
	out.p99, out.p999, out.max = quantile(lats, 0.99), quantile(lats, 0.999), slices.Max(lats)
	if len(due) > 0 {
		out.p99Due, out.maxDue = quantile(due, 0.99), slices.Max(due)
	}
	if len(lates) > 0 {
		out.lateP99, out.lateMx = quantile(lates, 0.99), slices.Max(lates)
	}
	if *latSeries {
		logSeries(b, start, samples)
	}
	return out
}

// cpuTicks is the machine's CPU time in clock ticks, summed over its cores (/proc/stat), and
// how many cores the sum is over.
type cpuTicks struct {
	busy, total uint64
	cores       int
}

// machineCPU reads the machine's CPU time so far from /proc/stat's first line ("cpu  user
// nice system idle iowait irq softirq steal ..."), over the cores its "cpuN" lines count: busy
// is everything but idle and iowait (steal included: time the core was not this machine's).
// Zero where the file cannot be read (not Linux).
func machineCPU() cpuTicks {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}
	}
	lines := strings.Split(string(data), "\n")
	fields := strings.Fields(lines[0])
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuTicks{}
	}
	var t cpuTicks
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "cpu") {
			t.cores++
		}
	}
	for i, f := range fields[1:] {
		if i >= 8 { // guest and guest_nice are already counted in user and nice
			break
		}
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTicks{}
		}
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	return t
}

// quantile returns the q quantile of xs (sorting xs).
func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}

// logSeries logs the healthy records' p99 and max latency by the second they were sent in.
func logSeries(b *testing.B, start time.Time, samples []latSample) {
	bySec := map[int][]time.Duration{}
	last := 0
	for _, s := range samples {
		sec := int(time.Duration(s.sent - start.UnixNano()).Seconds())
		bySec[sec] = append(bySec[sec], s.latency)
		last = max(last, sec)
	}
	var sb strings.Builder
	for sec := 0; sec <= last; sec++ {
		l := bySec[sec]
		if len(l) == 0 {
			continue
		}
		fmt.Fprintf(&sb, " %ds:%s/%s", sec, quantile(l, 0.99).Round(time.Millisecond), slices.Max(l).Round(time.Millisecond))
	}
	b.Logf("p99/max by second sent:%s", sb.String())
}

// sampleHeap returns the largest live heap (as of the last GC: what survived it) seen every
// 250 ms until stop closes.
func sampleHeap(stop <-chan struct{}) uint64 {
	runtime.GC() // the runs before this one leave nothing behind
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var peak uint64
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(s)
		peak = max(peak, s[0].Value.Uint64())
		select {
		case <-stop:
			return peak
		case <-t.C:
		}
	}
}

// warmupPartitioner places keyless records (the warm-up) on the partition they name and hashes
// the others' keys.
type warmupPartitioner struct{ hash, manual sarama.Partitioner }

func (p warmupPartitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if m.Key == nil {
		return p.manual.Partition(m, n)
	}
	return p.hash.Partition(m, n)
}

func (p warmupPartitioner) RequiresConsistency() bool { return true }

var backlogRecords = flag.Int("kafka.backlog.records", 1_000_000, "BenchmarkRetryBacklog: retry records waiting before the load starts")

// BenchmarkRetryBacklog measures what a large number of waiting retries costs the consumer:
// -kafka.backlog.records (default 1,000,000) retry records, due in 9 minutes, are written to
// the retry topic of a 3-partition topic before its consumer starts; then healthy records are
// offered at the first of -kafka.latency.rates for -kafka.latency.run (default 20 s). Each round
// runs the same load without the backlog (A) and with it (B). It prints benchround lines, min /
// median / max over -kafka.latency.rounds: each one's healthy-record p99 (ms) and live heap's
// peak (after a GC), and the p99 ratio B/A. No retry may reach the handler (they are not due).
//
// The brokers hold the backlog in memory (kfake): run it against a cluster of its own, e.g.
//
//	/tmp/millrace-kfake/kfakebroker -port 29092 -brokers 1 &   # built by .ci/services/kafka.sh
//	MILLRACE_KAFKA_BROKERS=127.0.0.1:29092 go test ./adapters/kafka/ -run '^$' \
//	    -bench BenchmarkRetryBacklog -benchtime 1x -timeout 60m -kafka.latency.rounds 2
func BenchmarkRetryBacklog(b *testing.B) {
	rate, err := strconv.Atoi(strings.Split(*latRates, ",")[0])
	if err != nil {
		b.Fatal(err)
	}
	run := *latRun
	if run <= 0 {
		run = 20 * time.Second
	}
	for range b.N {
		runs := map[string][]latencyRun{}
		v := func(name string, waiting int) benchround.Variant {
			return benchround.Variant{Name: name, Run: func(b *testing.B) float64 {
				r := backlogOnce(b, rate, run, waiting)
				b.Logf("round %d %s: %s", len(runs[name]), name, r)
				runs[name] = append(runs[name], r)
				return r.p99.Seconds() * 1000
			}}
		}
		res := benchround.Interleave(b, *latRounds, v("no_backlog", 0), v("backlog", *backlogRecords))
		benchround.Report(b, res, "p99_ms", benchround.Pair{A: "backlog", B: "no_backlog"})
		heap := benchround.Result{Names: res.Names, Values: make([][]float64, len(res.Names))}
		for i, name := range res.Names {
			for _, r := range runs[name] {
				heap.Values[i] = append(heap.Values[i], float64(r.heapPeak)/(1<<20))
			}
		}
		benchround.Report(b, heap, "heap_peak_MiB")
	}
}

// backlogOnce writes waiting retry records to a fresh topic's retry topic, then consumes the
// topic while offering healthy records at rate for run.
func backlogOnce(b *testing.B, rate int, run time.Duration, waiting int) latencyRun {
	const delay = 10 * time.Minute
	a := newAdapter(b, "", func(c *kafka.Config) {
		c.Partitions = benchPartitions
		c.Logger = slog.New(slog.DiscardHandler)
	})
	defer a.Close()
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(delay)}
	topic := uniqueName("backlog")
	if err := a.Provision(ctxT(b, 30*time.Second), topic, policy); err != nil {
		b.Fatal(err)
	}
	pc := sarama.NewConfig()
	pc.Version = sarama.V2_8_0_0
	pc.Producer.RequiredAcks = sarama.WaitForLocal
	pc.Producer.Return.Errors = true
	pc.Producer.Flush.Frequency = time.Millisecond
	pc.Producer.Partitioner = func(topic string) sarama.Partitioner {
		return warmupPartitioner{hash: sarama.NewHashPartitioner(topic), manual: sarama.NewManualPartitioner(topic)}
	}
	prod, err := sarama.NewAsyncProducer(brokers(b), pc)
	if err != nil {
		b.Fatal(err)
	}
	var prodErr atomic.Value
	go func() {
		for e := range prod.Errors() {
			prodErr.Store(e.Err)
		}
	}()
	if waiting > 0 {
		due := []byte(time.Now().Add(delay - time.Minute).UTC().Format(time.RFC3339Nano))
		for i := range waiting {
			k := strconv.Itoa(i)
			prod.Input() <- &sarama.ProducerMessage{
				Topic: topic + kafka.RetrySuffix, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(`{"n":` + k + `}`),
				Headers: []sarama.RecordHeader{
					{Key: []byte(millrace.HeaderAttempt), Value: []byte("2")},
					{Key: []byte(millrace.HeaderNotBefore), Value: due},
					{Key: []byte(millrace.HeaderOriginalTopic), Value: []byte(topic)},
				},
			}
		}
		// Written before the consumer starts: a flush of the async producer.
		_ = prod.Close()
		if prod, err = sarama.NewAsyncProducer(brokers(b), pc); err != nil {
			b.Fatal(err)
		}
		go func() {
			for e := range prod.Errors() {
				prodErr.Store(e.Err)
			}
		}()
	}
	if err, _ := prodErr.Load().(error); err != nil {
		b.Fatalf("writing the backlog: %v", err)
	}

	var (
		mu       sync.Mutex
		samples  = make([]latSample, 0, int(float64(rate)*run.Seconds())+16)
		early    atomic.Int64
		healthyN atomic.Int64
	)
	warm := make(chan struct{}, 16)
	r, err := router.New(router.Config{Adapter: a, Policy: policy, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	r.Handle("backlog", topic, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		now := time.Now()
		if msg.Metadata.Get("warmup") != "" {
			warm <- struct{}{}
			return nil
		}
		if at.Number > 1 {
			early.Add(1)
			return nil
		}
		sent, _ := strconv.ParseInt(msg.Metadata.Get("t"), 10, 64)
		mu.Lock()
		samples = append(samples, latSample{sent: sent, latency: now.Sub(time.Unix(0, sent))})
		mu.Unlock()
		healthyN.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); _ = r.Close(); <-done }()
	for p := range benchPartitions {
		prod.Input() <- &sarama.ProducerMessage{Topic: topic, Partition: int32(p), Value: sarama.StringEncoder("{}"),
			Headers: []sarama.RecordHeader{{Key: []byte("warmup"), Value: []byte("1")}}}
	}
	for range benchPartitions {
		select {
		case <-warm:
		case <-time.After(2 * time.Minute):
			b.Fatal("warm-up records not handled within 2 minutes")
		}
	}
	heapStop := make(chan struct{})
	heapDone := make(chan uint64)
	go func() { heapDone <- sampleHeap(heapStop) }()
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	sent := 0
	for now := range tick.C {
		elapsed := now.Sub(start)
		if elapsed >= run {
			break
		}
		for want := int(elapsed.Seconds() * float64(rate)); sent < want; sent++ {
			k := strconv.Itoa(sent)
			prod.Input() <- &sarama.ProducerMessage{
				Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(`{"n":` + k + `}`),
				Headers: []sarama.RecordHeader{{Key: []byte("t"), Value: strconv.AppendInt(nil, time.Now().UnixNano(), 10)}},
			}
		}
	}
	tick.Stop()
	_ = prod.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for healthyN.Load() < int64(sent) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d healthy records handled", healthyN.Load(), sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(heapStop)
	out := latencyRun{heapPeak: <-heapDone}
	if n := early.Load(); n > 0 {
		b.Fatalf("%d retries handled 9 minutes early", n)
	}
	mu.Lock()
	defer mu.Unlock()
	lats := make([]time.Duration, len(samples))
	for i, s := range samples {
		lats[i] = s.latency
	}
	out.p99, out.p999, out.max = quantile(lats, 0.99), quantile(lats, 0.999), slices.Max(lats)
	out.p99Due, out.maxDue = out.p99, out.max
	return out
}
