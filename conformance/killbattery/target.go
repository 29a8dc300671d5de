package killbattery

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Target is one adapter under the battery. The adapter's test implements it; Run does the rest.
//
// No method takes a testing.TB on purpose: NewAdapter also runs in the child processes, whose
// test ends (and whose clean-ups run) while the parent still needs the broker state, so an
// adapter helper that deletes topics in t.Cleanup must not be reused here. Broker clean-up is
// Cleanup's job, in the parent only.
type Target interface {
	// NewAdapter returns a connected adapter on the broker under test. The battery calls it
	// once in the parent process (to provision the topic, publish the workload, read the dead
	// letters and count what is pending) and once in every child (to consume), and closes each
	// adapter it got. Every call must return the same configuration (consumer group, queue
	// type, window, timings): each child takes over the work of the one killed before it.
	// Choose timings that let a killed consumer's messages come back within seconds (Redis:
	// a short MinIdle), so that the battery stays short.
	NewAdapter(ctx context.Context) (millrace.Adapter, error)

	// DeadLetterSubscriber returns the subscriber the parent reads a.DeadLetterTopic(topic)
	// with, as an operator's tool would: a.Subscriber() where that reads dead-letter
	// destinations, or the adapter's dedicated one (Redis: DeadLetterSubscriber). Every message
	// it delivers must decode with deadletter.FromMessage. The battery closes it.
	DeadLetterSubscriber(ctx context.Context, a millrace.Adapter) (message.Subscriber, error)

	// Pending reports how many messages of topic the broker still holds outside the dead
	// letters: not yet delivered, delivered and not acknowledged, or waiting for a retry. The
	// battery waits for 0 while the last child runs, and requires 0 once it has stopped. Where
	// the broker cannot count what a live consumer holds unacknowledged (a RabbitMQ passive
	// declare counts ready messages only), counting the rest is enough: the battery also waits
	// for a quiet second before it stops the last child, and asks again once it has.
	Pending(ctx context.Context, a millrace.Adapter, topic string) (int, error)

	// Cleanup deletes what the battery left on the broker for topic (work, retry and
	// dead-letter state). It runs in the parent when the test ends, after a was closed, so it
	// must use a connection of its own. An error is logged, not failed.
	Cleanup(ctx context.Context, a millrace.Adapter, topic string) error

	// Bound is what the adapter guarantees across SIGKILLs, exactly as its package
	// documentation states it (a "# Crashes" section); the battery enforces it.
	Bound() Bound
}

// Bound is what one adapter guarantees when its consumer processes are killed with SIGKILL and
// restarted. What holds for every adapter is not part of it and always checked: no message is
// lost (each ends SUCCESS or dead-lettered), nothing is left pending, dead letters keep the
// payload byte for byte, the handler is never called past MaxAttempts, a handler call is
// repeated only after a kill of a process that had called it, and an exhausted dead letter
// records at least MaxAttempts attempts.
//
// The zero Bound is the strictest possible: a kill repeats nothing and costs no attempt.
type Bound struct {
	// RepeatsPerKill is the most handler calls one kill may cost: calls that the kill
	// interrupted, or that had finished but whose ack, retry or dead letter had not reached the
	// broker, and that are therefore made again. It follows from how many deliveries a consumer
	// holds unsettled at once (its in-flight window).
	RepeatsPerKill int
	// ExtraDeadLettersPerKill is how many dead letters beyond one per message one kill may
	// cause: a dead letter was written but the kill lost the ack of its original, which is
	// delivered and dead-lettered again. 0 where the dead letter and the ack are one atomic step
	// (Redis: one Lua script) or one transaction. The battery holds the run's extra dead
	// letters to this times the kills, in total (it cannot tell which kill caused which).
	ExtraDeadLettersPerKill int
	// CrashCostsAttempt reports that a delivery interrupted by a kill counts as an attempt, so a
	// message interrupted often enough is dead-lettered as exhausted whatever its handler
	// returns (one whose handler succeeded but whose ack was lost included). When false, a
	// message whose handler succeeds is never dead-lettered.
	CrashCostsAttempt bool
	// AttemptsIncrease reports that every delivery is counted, crashes included, so a message's
	// handler calls have strictly increasing attempt numbers and no message gets more than
	// MaxAttempts calls.
	AttemptsIncrease bool
	// ForksChains reports that a kill may leave a message two retry chains (a retry written
	// whose source was not yet acknowledged, handled again by the next process: Kafka in
	// AtLeastOnce mode), so the repeats a kill explains are a whole chain's calls, made by
	// later processes, not one call.
	ForksChains bool
}
