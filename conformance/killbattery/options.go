package killbattery

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"
)

// SeedEnv names the environment variable that replays a battery: Run logs the seed it used, and
// MILLRACE_KILLBATTERY_SEED=<seed> makes the next run choose the same kill moments and the same
// workload order (the broker's own timing still varies).
const SeedEnv = "MILLRACE_KILLBATTERY_SEED"

// Options size the battery. Zero fields take the defaults shown.
type Options struct {
	// Messages is the workload size. Default 200: 60 % succeed, 20 % fail once, 10 % fail
	// forever, 10 % are malformed.
	Messages int
	// Kills is how many consumer processes are killed with SIGKILL before the last one is let
	// run until everything is settled. Default 20.
	Kills int
	// MaxAttempts is the policy's attempt limit. Default 3.
	MaxAttempts int
	// Delay is the policy's fixed retry delay. Default 300 ms.
	Delay time.Duration
	// HandlerSleep is the longest a handler call sleeps (a random time up to it), so that a
	// kill lands in the middle of calls, not only between them. Default 20 ms.
	HandlerSleep time.Duration
	// Lifetime is the longest a child lives before it is killed; it is killed earlier, after a
	// random number of handler calls, when those come first. Default 1.5 s.
	Lifetime time.Duration
	// SettleTimeout bounds the wait for the last child to settle every message. Default 60 s.
	SettleTimeout time.Duration
	// Seed seeds the kill moments and the workload order. Default: $MILLRACE_KILLBATTERY_SEED,
	// else random. Run logs it.
	Seed uint64
	// TopicName shapes the battery's topic name ("killbattery.<test>.<random>") as the broker
	// needs it (a Redis Cluster wraps it in a hash tag). Default: the name as it is.
	TopicName func(name string) string
}

func (o Options) withDefaults() (Options, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Messages, 200)
	def(&o.Kills, 20)
	def(&o.MaxAttempts, 3)
	defDur(&o.Delay, 300*time.Millisecond)
	defDur(&o.HandlerSleep, 20*time.Millisecond)
	defDur(&o.Lifetime, 1500*time.Millisecond)
	defDur(&o.SettleTimeout, 60*time.Second)
	if o.TopicName == nil {
		o.TopicName = func(name string) string { return name }
	}
	switch {
	case o.Messages < 0, o.Kills < 0, o.MaxAttempts < 0:
		return o, fmt.Errorf("killbattery: Options.Messages, Kills and MaxAttempts must not be negative (%d, %d, %d)", o.Messages, o.Kills, o.MaxAttempts)
	case o.MaxAttempts < 2:
		return o, fmt.Errorf("killbattery: Options.MaxAttempts = %d: must be at least 2 (a message that fails once must be able to succeed)", o.MaxAttempts)
	case o.Delay < 0, o.HandlerSleep < 0, o.Lifetime < 0, o.SettleTimeout < 0:
		return o, fmt.Errorf("killbattery: Options durations must not be negative")
	}
	if o.Seed == 0 {
		if s := os.Getenv(SeedEnv); s != "" {
			seed, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return o, fmt.Errorf("killbattery: %s=%q: %w", SeedEnv, s, err)
			}
			o.Seed = seed
		} else {
			o.Seed = rand.Uint64()
		}
	}
	return o, nil
}
