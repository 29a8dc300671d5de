package main

import "time"

// entry is one benchmark invocation of the list: from the repository root,
//
//	go test -run '^$' -bench <Bench> -benchtime <mode.Benchtime> -count 1 -timeout <mode.Timeout> <Pkg> <mode.Flags> [<RoundsFlag> <rounds>]
//
// The benchmark prints benchround lines (internal/benchround) that tools/bench collects. Names,
// flags and figures are data: when a benchmark is renamed or gains a flag, only this list
// changes.
type entry struct {
	Name       string   // the table's first column; -only matches it
	Pkg        string   // package path, ./...
	Bench      string   // go test -bench regexp
	RoundsFlag string   // test flag setting the interleaved rounds ("" when there is none); -rounds overrides its value
	Services   []string // .ci/services scripts (without .sh) whose environment it needs; .ci/bench sources them all
	Full       *mode    // the default run: the rates and delays
	Quick      *mode    // -quick; nil: not run with -quick
}

// mode is how an entry runs in one of the two lengths.
type mode struct {
	Benchtime string        // go test -benchtime
	Rounds    int           // value of RoundsFlag (0: the benchmark's default)
	Flags     []string      // further test flags, after the package
	Timeout   time.Duration // go test -timeout
	Estimate  time.Duration // wall time on the 2-core CI machine kind, compile time excluded, for the printed estimate
}

// entries is the fixed list `go run ./tools/bench` runs, in this order. The issue-16 targets
// are printed by the benchmarks themselves (benchround.Pair.Target), not set here.
var entries = []entry{
	{
		// Happy-path middleware overhead over a bare handler: <= +275 ns, <= +2 allocations.
		Name: "router", Pkg: "./router", Bench: "^BenchmarkHandlerChain$", RoundsFlag: "-router.rounds",
		Full:  &mode{Benchtime: "1000000x", Rounds: 15, Timeout: 20 * time.Minute, Estimate: 3 * time.Minute},
		Quick: &mode{Benchtime: "200000x", Rounds: 5, Timeout: 10 * time.Minute, Estimate: 15 * time.Second},
	},
	{
		// The stack's cost where adapters run it: a Watermill router's goroutine per message,
		// with a Budget (the default on Redis Streams and SQS). No target of its own; it is the
		// ceiling the broker ratios below live under. Sized by -router.msgs: -benchtime 1x.
		Name: "router-throughput", Pkg: "./router", Bench: "^BenchmarkRouterThroughput$", RoundsFlag: "-router.throughputRounds",
		Full:  &mode{Benchtime: "1x", Rounds: 7, Timeout: 10 * time.Minute, Estimate: 30 * time.Second},
		Quick: &mode{Benchtime: "1x", Rounds: 3, Flags: []string{"-router.msgs", "50000"}, Timeout: 5 * time.Minute, Estimate: 5 * time.Second},
	},
	{
		// millrace vs a raw jetstream loop and watermill-nats (bare and behind a router).
		Name: "nats", Pkg: "./adapters/nats", Bench: "^BenchmarkConsumeAnchors$", RoundsFlag: "-nats.rounds",
		Full:  &mode{Benchtime: "20000x", Rounds: 7, Timeout: 30 * time.Minute, Estimate: 2 * time.Minute},
		Quick: &mode{Benchtime: "5000x", Rounds: 3, Timeout: 10 * time.Minute, Estimate: 20 * time.Second},
	},
	{
		// Redis Streams >= 0.5x a raw XREADGROUP COUNT 100 loop, ahead of watermill-redisstream.
		// Sized by -redisstream.msgs, not b.N: -benchtime 1x runs it once.
		Name: "redisstream", Pkg: "./adapters/redisstream", Bench: "^BenchmarkConsumeAnchors$", RoundsFlag: "-redisstream.rounds",
		Full:  &mode{Benchtime: "1x", Rounds: 7, Flags: []string{"-redisstream.msgs", "20000"}, Timeout: 30 * time.Minute, Estimate: 3 * time.Minute},
		Quick: &mode{Benchtime: "1x", Rounds: 3, Flags: []string{"-redisstream.msgs", "5000"}, Timeout: 10 * time.Minute, Estimate: 30 * time.Second},
	},
	{
		// RabbitMQ >= 0.7x a raw amqp091 loop, ahead of watermill-amqp. Sized by -amqp.msgs, not
		// b.N: -benchtime 1x runs it once.
		Name: "amqp", Pkg: "./adapters/amqp", Bench: "^BenchmarkConsumeAnchors$", RoundsFlag: "-amqp.rounds",
		Full:  &mode{Benchtime: "1x", Rounds: 7, Flags: []string{"-amqp.msgs", "20000"}, Timeout: 30 * time.Minute, Estimate: 4 * time.Minute},
		Quick: &mode{Benchtime: "1x", Rounds: 3, Flags: []string{"-amqp.msgs", "5000"}, Timeout: 10 * time.Minute, Estimate: 50 * time.Second},
	},
	{
		// SQS >= 0.5x a raw 8-poller SDK loop, ahead of watermill-aws.
		Name: "sqs", Pkg: "./adapters/sqs", Bench: "^BenchmarkConsumeAnchors$", RoundsFlag: "-sqs.rounds",
		Services: []string{"sqs"},
		Full:     &mode{Benchtime: "3000x", Rounds: 7, Timeout: 40 * time.Minute, Estimate: 8 * time.Minute},
		Quick:    &mode{Benchtime: "1000x", Rounds: 3, Timeout: 15 * time.Minute, Estimate: 90 * time.Second},
	},
	{
		// Kafka latency while retries wait, 10 % failing: healthy p99 <= 1.5x the all-healthy
		// p99, consumption keeps up, retries within delay + 10 %. Each run offers load for
		// 40 s, longer than its delay plus 30 s.
		Name: "kafka-latency", Pkg: "./adapters/kafka", Bench: "^BenchmarkRetryLatency$", RoundsFlag: "-kafka.latency.rounds",
		Services: []string{"kafka"},
		Full: &mode{Benchtime: "1x", Rounds: 3, Timeout: 90 * time.Minute, Estimate: 20 * time.Minute,
			Flags: []string{"-kafka.latency.rates", "5000,15000", "-kafka.latency.delays", "1s,5s", "-kafka.latency.run", "40s", "-kafka.latency.failpct", "10"}},
		Quick: &mode{Benchtime: "1x", Rounds: 2, Timeout: 20 * time.Minute, Estimate: 90 * time.Second,
			Flags: []string{"-kafka.latency.rates", "5000", "-kafka.latency.delays", "1s", "-kafka.latency.run", "10s", "-kafka.latency.failpct", "10"}},
	},
	{
		// The same with a 60 s delay, runs of 95 s (> 60 s + 30 s). Not run with -quick.
		Name: "kafka-latency-60s", Pkg: "./adapters/kafka", Bench: "^BenchmarkRetryLatency$", RoundsFlag: "-kafka.latency.rounds",
		Services: []string{"kafka"},
		Full: &mode{Benchtime: "1x", Rounds: 2, Timeout: 90 * time.Minute, Estimate: 25 * time.Minute,
			Flags: []string{"-kafka.latency.rates", "5000,15000", "-kafka.latency.delays", "60s", "-kafka.latency.run", "95s", "-kafka.latency.failpct", "10"}},
	},
	{
		// Kafka CPU per failing record <= 2x a healthy one's (and healthy throughput with 10 %
		// failing against the all-healthy run and bare watermill-kafka).
		Name: "kafka-cpu", Pkg: "./adapters/kafka", Bench: "^BenchmarkRetryIsolation$", RoundsFlag: "-kafka.rounds",
		Services: []string{"kafka"},
		Full:     &mode{Benchtime: "1x", Rounds: 15, Flags: []string{"-kafka.rounds30k", "3"}, Timeout: 60 * time.Minute, Estimate: 10 * time.Minute},
		Quick:    &mode{Benchtime: "1x", Rounds: 3, Flags: []string{"-kafka.rounds30k", "1"}, Timeout: 20 * time.Minute, Estimate: 2 * time.Minute},
	},
}

// serviceEnv names, per .ci/services script, the variable it exports that the benchmarks read:
// an entry needing the service is not run when it is unset (the test would fail, or skip).
var serviceEnv = map[string]string{
	"kafka": "MILLRACE_KAFKA_BROKERS",
	"sqs":   "MILLRACE_SQS_ENDPOINT",
}
