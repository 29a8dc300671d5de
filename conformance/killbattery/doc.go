// Package killbattery is the crash test every millrace adapter runs: a consumer process on a
// mixed workload is killed with SIGKILL at random moments, Options.Kills times (default 20),
// and restarted, and a ledger kept outside the processes shows what survived.
//
// # What it does
//
// The workload (Options.Messages, default 200) mixes messages that succeed, fail once (Retry on
// attempt 1), fail forever (Retry on every attempt, MaxAttempts 3, delay 300 ms) and are
// malformed (the handler returns millrace.Malformed); the kind is in the payload. The parent
// (the test process) publishes it in Kills+1 batches, one before each child starts, so that
// every kill finds fresh work in flight. Each child is the test binary itself, re-executed with
// -test.run selecting only the calling test and ChildEnv set: it runs the Target's adapter
// behind router.New with the battery's handler. The parent kills a child after a random number
// of handler calls, or at a random moment of Options.Lifetime when that comes first, plus a
// random pause, so kills land during calls, between a call and its ack, and while the consumer
// starts. The last child runs until every message has succeeded or been dead-lettered and the
// broker holds nothing more (Target.Pending), and is then stopped with SIGTERM.
//
// The handler appends a line to the ledger, a file opened with O_APPEND, when a call starts and
// when it returns, before it returns (see ledger.go). From the ledger and the dead letters the
// parent checks what holds for every adapter (see Bound) and the adapter's own Bound, and logs
// one line of counts:
//
//	kill battery TestKillBattery (seed 42): messages=200 kills=20 calls=321 (no-crash 280)
//	duplicates=41 interrupted=57 max-repeats-per-kill=8 (bound 16) dead-letters=40 (messages 40,
//	extra 0, bound 0 per kill) succeeded-and-dead-lettered=0 lost=0 pending=0, took 6.5s
//
// duplicates are the calls beyond the no-crash count; interrupted the calls a kill cut short;
// max-repeats-per-kill the most calls one kill cost (interrupted, or finished but not settled
// on the broker, and made again). The seed replays the kill moments and the workload order
// (SeedEnv); a failure names the directory that holds every child's log.
//
// # How to add an adapter
//
// In the adapter's test package, implement Target: NewAdapter (the same configuration on every
// call, with timings that bring a killed consumer's messages back within seconds),
// DeadLetterSubscriber, Pending, Cleanup and Bound; adapters/redisstream/kill_test.go and
// adapters/amqp/kill_test.go are two examples. Call Run from a test (or subtest) of its own,
// after the check that skips the test, or fails it in CI, when the broker is unreachable:
//
//	func TestKillBattery(t *testing.T) {
//		requireBroker(t)
//		killbattery.Run(t, killTarget{}, killbattery.Options{})
//	}
//
// The test body before Run also runs in every child: it must not delete broker state when it
// ends (the children's tests end before the parent checks), and it must not start work of its
// own.
//
// State the adapter's crash bound in its package documentation, in a "# Crashes" section, and
// return exactly that from Bound. Find it in the code: how many deliveries a consumer holds
// unsettled at once (RepeatsPerKill), whether the dead letter and the original's ack are one
// atomic step (ExtraDeadLettersPerKill), whether an interrupted delivery counts as an attempt
// (CrashCostsAttempt), whether every delivery counts (AttemptsIncrease). If the battery finds
// that the code does less than you expected, the code or the documentation is wrong: fix one,
// never the battery's check.
//
// A battery takes 5 to 15 s with the defaults. It needs a Unix system (SIGKILL, SIGTERM).
package killbattery
