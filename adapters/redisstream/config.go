package redisstream

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
)

// DefaultURL is the Redis the adapter connects to when Config has neither Client nor URL.
const DefaultURL = "redis://127.0.0.1:6379/0"

// Defaults of Config, applied to zero fields.
const (
	DefaultWindow           = 64
	DefaultReadBlock        = 250 * time.Millisecond
	DefaultProcessingBudget = 30 * time.Second
	DefaultReclaimInterval  = time.Second
	DefaultReclaimBatch     = 1000
	// DefaultRecoverDivisor: RecoverInterval defaults to MinIdle / 4 (at least ReclaimInterval).
	DefaultRecoverDivisor   = 4
	DefaultDeadLetterSuffix = ".dlq"
	DefaultGroupStartID     = "0"
)

// Config configures the Redis Streams adapter. Zero fields take the defaults shown.
//
// How the budget, the idle time and the policy relate (the rule that keeps the reclaimer from
// stealing an entry a live consumer is still working on):
//
//   - ProcessingBudget is the longest a live consumer holds an entry between its delivery and its
//     ack or nack. Set it to router.Config.Budget (the handler's deadline) plus headroom for the
//     middleware's dead-letter or retry write; ValidateBudget checks a router budget against it.
//   - An entry that nobody gave back (its consumer is still working, or died) is claimed only once
//     it has been idle for max(policy delay for its delivery count, MinIdle). MinIdle defaults to
//     ProcessingBudget, and Validate refuses a MinIdle shorter than ProcessingBudget, so a live
//     consumer within its budget never loses its entry.
//   - An entry its consumer gave back with a Retry outcome is due exactly its retry delay after
//     the failure, however short: ScheduleRetry records its due time in the retry schedule. No
//     consumer is working on it any more, so a short retry delay cannot steal anything.
//
// The field report's production setup reads: ReclaimInterval and RecoverInterval 1 min, policy
// Fixed(5 min) with MaxAttempts 3 (the entry is dead-lettered when its delivery count exceeds
// 3), router budget 104 s, ProcessingBudget 2 min, MinIdle 5 min.
type Config struct {
	// Client is the Redis connection. Optional: when nil the adapter connects to URL and closes
	// that client on Close; a Client passed in is never closed by the adapter, but New adds a
	// dial hook to it (see Connection loss in the package documentation).
	Client redis.UniversalClient
	// URL is the Redis URL used when Client is nil. Default DefaultURL.
	URL string
	// Group is the consumer group every subscription joins. Required. Give tools (consoles,
	// scripts) their own group name: a member of this group takes entries from the service.
	Group string
	// Consumer prefixes the consumer names; every subscription appends a unique suffix, so
	// several subscriptions and several processes share the group. Default: the host name.
	Consumer string
	// GroupStartID is where a consumer group created by the adapter starts: "0" (the whole
	// stream) or "$" (only entries added later). Default "0", so no entry is ever skipped.
	GroupStartID string
	// Window is how many messages one subscription has in flight (handed out, not yet acked or
	// nacked). The Watermill router handles them concurrently, so Window > 1 gives up ordering;
	// Window 1 handles a subscription's entries one at a time in stream order (retries excepted).
	// It is also the largest read and claim batch. Default 64.
	Window int
	// ReadBlock is how long one XREADGROUP waits for new entries. It bounds how long closing a
	// subscription takes. Default 250 ms. A wait is also kept below half the client's
	// ReadTimeout (XREADGROUP is sent with Do, which go-redis does not give a longer timeout).
	ReadBlock time.Duration
	// ProcessingBudget is the longest a live consumer holds an entry; see the type's
	// documentation. Default 30 s.
	ProcessingBudget time.Duration
	// MinIdle is the shortest idle time after which an entry nobody gave back may be claimed.
	// Must be >= ProcessingBudget. Default ProcessingBudget.
	MinIdle time.Duration
	// ReclaimInterval is how often a subscription looks for due retries (a cheap lookup in the
	// retry schedule). It is the resolution of retry delays: a retry arrives up to one interval
	// after it is due. Default 1 s.
	ReclaimInterval time.Duration
	// RecoverInterval is how often a subscription walks the PEL for entries nobody gave back
	// (a dead consumer's): such an entry is delivered again between its threshold and its
	// threshold plus RecoverInterval. Default MinIdle/4, at least ReclaimInterval.
	RecoverInterval time.Duration
	// ReclaimBatch is how many entries one claim or XPENDING call handles at most (it never
	// exceeds the free window). Default 1000.
	ReclaimBatch int
	// DeadLetterStream names the dead-letter stream of a stream. Default: stream + ".dlq". In a
	// Redis Cluster it must hash to the stream's slot: the default does for a stream with a
	// {hash tag} ("{orders}.events" gives "{orders}.events.dlq"), not for an untagged one.
	DeadLetterStream func(stream string) string
	// MaxLen, when positive, trims streams on publish to about this many entries (XADD MAXLEN ~).
	// Trimmed entries that are still pending are acknowledged and counted by the reclaimer.
	// Default 0: never trim.
	MaxLen int64
	// Logger receives the adapter's logs. Default slog.Default().
	Logger *slog.Logger
}

// Validate checks every field; the zero value is invalid only because Group is required.
func (c Config) Validate() error {
	switch {
	case c.Group == "":
		return &millrace.ConfigError{Field: "redisstream.Config.Group", Value: `""`, Rule: "is required"}
	case c.GroupStartID != "" && c.GroupStartID != "0" && c.GroupStartID != "$":
		return &millrace.ConfigError{Field: "redisstream.Config.GroupStartID", Value: strconv.Quote(c.GroupStartID), Rule: `must be "0" or "$" (empty means "0")`}
	case c.Window < 0:
		return &millrace.ConfigError{Field: "redisstream.Config.Window", Value: strconv.Itoa(c.Window), Rule: "must not be negative (0 means 64)"}
	case c.ReadBlock < 0:
		return negative("ReadBlock", c.ReadBlock, DefaultReadBlock)
	case c.ReadBlock > 0 && c.ReadBlock < time.Millisecond:
		return &millrace.ConfigError{Field: "redisstream.Config.ReadBlock", Value: c.ReadBlock.String(), Rule: "must be at least 1ms (Redis blocks in whole milliseconds)"}
	case c.ProcessingBudget < 0:
		return negative("ProcessingBudget", c.ProcessingBudget, DefaultProcessingBudget)
	case c.MinIdle < 0:
		return negative("MinIdle", c.MinIdle, c.budget())
	case c.MinIdle > 0 && c.MinIdle < c.budget():
		return &millrace.ConfigError{Field: "redisstream.Config.MinIdle", Value: c.MinIdle.String(),
			Rule: "must be at least ProcessingBudget (" + c.budget().String() + "): a shorter reclaim idle time would steal entries that live consumers are still processing"}
	case c.ReclaimInterval < 0:
		return negative("ReclaimInterval", c.ReclaimInterval, DefaultReclaimInterval)
	case c.RecoverInterval < 0:
		return &millrace.ConfigError{Field: "redisstream.Config.RecoverInterval", Value: c.RecoverInterval.String(), Rule: "must not be negative (0 means MinIdle/4)"}
	case c.ReclaimBatch < 0:
		return &millrace.ConfigError{Field: "redisstream.Config.ReclaimBatch", Value: strconv.Itoa(c.ReclaimBatch), Rule: "must not be negative (0 means 1000)"}
	case c.MaxLen < 0:
		return &millrace.ConfigError{Field: "redisstream.Config.MaxLen", Value: strconv.FormatInt(c.MaxLen, 10), Rule: "must not be negative (0 means no trimming)"}
	}
	return nil
}

// ValidateBudget refuses a router processing budget (router.Config.Budget) longer than
// ProcessingBudget: with it, a handler could still run when the reclaimer hands its entry to
// another consumer. A budget of 0 (no deadline) is refused too, since nothing then bounds how
// long a handler holds an entry.
func (c Config) ValidateBudget(routerBudget time.Duration) error {
	if routerBudget <= 0 || routerBudget > c.budget() {
		return &millrace.ConfigError{Field: "router.Config.Budget", Value: routerBudget.String(),
			Rule: "must be positive and at most redisstream.Config.ProcessingBudget (" + c.budget().String() + ")"}
	}
	return nil
}

func negative(field string, v, def time.Duration) error {
	return &millrace.ConfigError{Field: "redisstream.Config." + field, Value: v.String(), Rule: "must not be negative (0 means " + def.String() + ")"}
}

func (c Config) budget() time.Duration {
	if c.ProcessingBudget == 0 {
		return DefaultProcessingBudget
	}
	return c.ProcessingBudget
}

func (c *Config) setDefaults() {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.GroupStartID == "" {
		c.GroupStartID = DefaultGroupStartID
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.ReadBlock == 0 {
		c.ReadBlock = DefaultReadBlock
	}
	c.ProcessingBudget = c.budget()
	if c.MinIdle == 0 {
		c.MinIdle = c.ProcessingBudget
	}
	if c.ReclaimInterval == 0 {
		c.ReclaimInterval = DefaultReclaimInterval
	}
	if c.RecoverInterval == 0 {
		c.RecoverInterval = max(c.MinIdle/DefaultRecoverDivisor, c.ReclaimInterval)
	}
	if c.ReclaimBatch == 0 {
		c.ReclaimBatch = DefaultReclaimBatch
	}
	if c.DeadLetterStream == nil {
		c.DeadLetterStream = func(stream string) string { return stream + DefaultDeadLetterSuffix }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}
