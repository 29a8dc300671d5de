package cutbattery

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Target is one adapter, or one component a consumer depends on (the idempotency store), put
// under the battery. An adapter package implements it in a test file and calls Run from a test
// named TestCutBattery; see the package documentation.
type Target interface {
	// Name names the target in the log ("redisstream", "amqp/quorum").
	Name() string
	// Upstreams lists the loopback addresses (host:port) of the connections to cut: every
	// broker (or store) the consumer talks to. The battery starts one Proxy per address and cuts
	// them all at once. It may skip the test (fail it in CI) when a broker is unreachable.
	Upstreams(t testing.TB) []string
	// Connect returns the system under test. Every connection its Adapter (and Middleware) makes
	// must go through proxied: proxied[i] is the proxy of Upstreams()[i]. topic is the topic the
	// battery uses; Connect registers the clean-up of what the run leaves on the broker.
	Connect(ctx context.Context, t testing.TB, topic string, proxied []string) (System, error)
}

// System is a Target connected for one run.
type System struct {
	// Adapter is the router's adapter, connected through the proxies. The battery closes it.
	Adapter millrace.Adapter
	// Publisher publishes the workload over a connection that is never cut. The battery tests
	// the consumer: a publish that failed in a cut would leave it unknown whether the message
	// exists, and "lost" would mean nothing. It also keeps messages arriving during the cuts,
	// so that they catch reads with entries in flight.
	Publisher message.Publisher
	// DeadLetters reads Adapter.DeadLetterTopic(topic) over a connection that is never cut;
	// every message it gives must decode with deadletter.FromMessage. The battery acks them.
	DeadLetters message.Subscriber
	// Pending reports how many messages of topic the broker still holds (waiting, unacked,
	// scheduled retries), as the consumer left them. The battery calls it once the router has
	// stopped and a second has passed, with the Adapter still open (it may still be flushing
	// acknowledgements; an in-process broker forgets everything at Close). A connection the
	// client abandoned in a black hole may still hold deliveries on the broker side until the
	// broker notices (RabbitMQ: its heartbeat timeout), which Bound.Settle must cover.
	Pending func(ctx context.Context, topic string) (int, error)
	// Middleware, when set, is added to the router inside the millrace stack (after it), around
	// the battery's handler: the idempotency middleware is one.
	Middleware []message.HandlerMiddleware
	// Bound is what the target's documentation promises; the battery holds it to that.
	Bound Bound
	// Report, when set, is called after the run with its result and logs what the target
	// counts itself (a middleware's Stats); its string is printed after the counts line.
	Report func(Result) string
	// ExtraDuplicates, when set, is called after the run and returns the duplicates the
	// target's documentation allows on top of Bound.DuplicatesPerCut, counted by the target
	// itself (the idempotency middleware's Stats.Unmarked).
	ExtraDuplicates func() int
}

// Bound is what a target documents about connection loss. Each number is checked against
// what the battery measures; the package documentation says how each is counted.
type Bound struct {
	// Resume is the longest the consumer may take, after a Restore, to hand the handler a
	// message published after it.
	Resume time.Duration
	// Settle is how long after the last Restore the consumer may still be recovering deliveries
	// the cuts left behind (a reply lost in a cut, a redelivery after an ack that never arrived).
	// The battery keeps the router running at least that long before it checks the broker.
	Settle time.Duration
	// DuplicatesPerCut is how many duplicates (see Result.Duplicates) one cut may cause.
	DuplicatesPerCut int
	// AttemptsLostPerCut is how many attempts one cut may use up without a handler call
	// (see Result.AttemptsLost); negative: not bounded, only reported (the idempotency
	// middleware returns Retry without calling the handler whenever its store is cut, by
	// design, so what a cut costs depends on how many messages arrive during it).
	AttemptsLostPerCut int
}
