package cutbattery

import "time"

// Options shape one run. Zero fields take the defaults shown; the defaults keep a run near
// 45 seconds on a 2-core machine.
type Options struct {
	// PublishEvery is the pause between two published messages. Default 50 ms (20/s). The
	// publisher runs from the start until the last cut's probe was handled, so the number of
	// messages follows from the cut schedule (about 700 with the defaults).
	PublishEvery time.Duration
	// Cuts is how many cuts the run makes. They alternate Reset and BlackHole (Reset first), and
	// land in turn on a dead-letter write, on a retry write and mid-stream. Default 6.
	Cuts int
	// ResetFor and BlackHoleFor are how long each kind of cut lasts. Defaults 2 s and 4 s: a
	// black hole outlasts go-redis's 3 s read timeout, so client timeouts fire inside it.
	ResetFor, BlackHoleFor time.Duration
	// Gap is the clean time before each cut. Default 2 s.
	Gap time.Duration
	// Kinds, when set, replaces the Reset/BlackHole alternation.
	Kinds []Kind
	// MaxAttempts and Delay are the router's policy: millrace.Fixed(Delay). Defaults 3 and 500 ms.
	MaxAttempts int
	Delay       time.Duration
	// RepublishEvery publishes every n-th "ok" message a second time (same UUID and payload)
	// half a second later, as a producer retrying a publish does; 0 never does. Use it for
	// targets that deduplicate (idempotency): for any other, each copy's handling counts as a
	// duplicate.
	RepublishEvery int
	// Handlers is how many times the battery's handler is registered on the topic (as
	// "cutbattery-1", ...): competing subscriptions, so that a broker that hands a subscription
	// one message at a time (the memory adapter, RabbitMQ's consumer here) still runs that many
	// handlers at once, and a client pool holds that many connections when a cut comes.
	// Default 1.
	Handlers int
	// Quiet is how long the handler must see nothing new before the battery stops the
	// router, once every message is finished and Bound.Settle has passed. Default 1 s.
	Quiet time.Duration
	// Timeout bounds the wait for every message to finish, after the last Restore plus
	// Bound.Settle. Default 30 s.
	Timeout time.Duration
	// TopicName shapes the battery's topic name ("cutbattery.<target>.<random>") as the broker
	// needs it (a Redis Cluster wraps it in a hash tag). Default: the name as it is.
	TopicName func(name string) string
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Cuts == 0 {
		o.Cuts = 6
	}
	if o.Handlers == 0 {
		o.Handlers = 1
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 3
	}
	def(&o.PublishEvery, 50*time.Millisecond)
	def(&o.ResetFor, 2*time.Second)
	def(&o.BlackHoleFor, 4*time.Second)
	def(&o.Gap, 2*time.Second)
	def(&o.Delay, 500*time.Millisecond)
	def(&o.Quiet, time.Second)
	def(&o.Timeout, 30*time.Second)
	if len(o.Kinds) == 0 {
		o.Kinds = []Kind{Reset, BlackHole}
	}
	if o.TopicName == nil {
		o.TopicName = func(name string) string { return name }
	}
	return o
}

// kind is the kind of cut i.
func (o Options) kind(i int) Kind { return o.Kinds[i%len(o.Kinds)] }

// length is how long cut i lasts.
func (o Options) length(i int) time.Duration {
	if o.kind(i) == BlackHole {
		return o.BlackHoleFor
	}
	return o.ResetFor
}
