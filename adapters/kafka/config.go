package kafka

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Config configures the Kafka adapter. Brokers and ConsumerGroup are required; every other
// field has the default shown.
type Config struct {
	// Brokers lists bootstrap brokers as host:port. Required.
	Brokers []string
	// ConsumerGroup is the consumer group every subscription joins; each Subscribe call is one
	// member consuming its topic and that topic's retry topics. Required: give every service
	// (and every tool) its own, since a stray member in a group takes partitions from the rest.
	ConsumerGroup string
	// Partitions is the partition count of a source topic Provision creates because it is
	// missing. Default 1.
	Partitions int32
	// RetryPartitions is the partition count of the retry and dead-letter topics Provision
	// creates. Default 0: as many as the source topic.
	RetryPartitions int32
	// ReplicationFactor of the topics Provision creates. Default 0 (or -1): the broker's default.
	ReplicationFactor int16
	// RetryRetention is the retention.ms of the retry topics: a retry must outlive its delay in
	// its topic. Default 7 days (Kafka's own default); must exceed MaxDelay.
	RetryRetention time.Duration
	// DeadLetterRetention is the retention.ms of the dead-letter topics Provision creates.
	// Default 0: unlimited (retention.ms=-1), so dead letters are never deleted before an
	// operator dealt with them (the broker default, often 7 days, would drop them silently).
	// A dead-letter topic that already exists keeps its settings.
	DeadLetterRetention time.Duration
	// MaxDelay is the longest retry delay accepted; longer policies are refused at start-up.
	// Capabilities().MaxDelay reports it. A RetryAfter delay is further capped at the largest
	// retry tier provisioned for the topic (see the package documentation).
	// Default 24 h.
	MaxDelay time.Duration
	// MaxTiers bounds the distinct delays of a policy, each one retry topic. Default 8, enough
	// for an exponential backoff over 9 attempts.
	MaxTiers int
	// SyncCommit, in AtLeastOnce mode, commits synchronously on each acknowledgement that
	// advances the partition's mark: the commit completes before the next record of the same
	// key is delivered. Records of other keys are still in flight meanwhile (up to
	// MaxInFlight); set MaxInFlight to 1 too for each commit to complete before the next
	// record of the partition is delivered. Default false: each acknowledgement wakes a
	// background committer (see CommitInterval). Only acknowledged records are ever committed,
	// and Sarama's periodic auto-commit stays off. Ignored in transactional mode, where each
	// partition's transactions carry its offsets.
	SyncCommit bool
	// CommitInterval is the least time between two commits: of a partition's transactions (by
	// default), or of a session's offset commits (AtLeastOnce). The first acknowledgement
	// after a quiet spell is committed at once, and those that follow within the interval
	// share the next commit. Default 10 ms: a busy consumer then sends at most 100 commits a
	// second each instead of one per broker round trip, which costs the brokers (and the client) more than the records themselves; a crash
	// repeats at most the records acknowledged in the last interval and the commit in flight.
	// Commits go over connections of their own, never behind a fetch long-poll.
	CommitInterval time.Duration
	// MaxInFlight is how many records of one partition may be handled at once. Records with
	// the same key (and records without a key, among themselves) are never in flight together,
	// so per-key order holds; offsets are committed strictly in order, only up to the first
	// record not yet acknowledged. 1 gives strict partition order for records that succeed; a
	// record whose retry or dead letter is being written no longer counts (its handler is done),
	// so records behind it go on meanwhile. Default 16: with one record at a time, each retry
	// publish (a broker round trip) stalls its whole partition. At most 16*MaxInFlight records
	// of a partition wait unmarked at once: a record that is never acknowledged (its retry or
	// dead letter cannot be written) stalls its partition after that many, with a warning
	// logged every 30 s, instead of letting memory grow.
	MaxInFlight int
	// RetryLinger is how long the producer of retries and dead letters holds a record for
	// others to share its produce request (Kafka's linger.ms; sarama's Producer.Flush.Frequency).
	// Records published through Publisher never wait. Default 1 ms (Kafka's own producer
	// defaults to 5 ms since 4.0): when many records fail at once, the brokers get fewer,
	// larger requests, for at most a millisecond more before a failing record is acknowledged.
	// Negative keeps the flush settings of Config.Sarama.
	RetryLinger time.Duration
	// NackDelay is how long a nacked record (its retry or dead letter could not be written)
	// waits before the subscription delivers it again. Default 500 ms.
	NackDelay time.Duration
	// ReconnectDelay is the pause before a subscription rejoins after its group session failed
	// (broker unreachable, topic not created yet). Default 250 ms.
	ReconnectDelay time.Duration
	// PartitionKey gives the record key of a message published through Publisher. Default nil:
	// no key (records are spread over partitions). Retries and dead letters always keep the
	// original record's key, whatever this returns.
	PartitionKey func(topic string, msg *message.Message) (string, error)
	// AtLeastOnce turns off transactions. By default (false) each claimed partition writes
	// its retries and dead letters and commits its offsets in Kafka transactions, and every
	// topic is read read_committed: a retry or dead letter and the offset past its source
	// record become visible together or not at all, so a crash at any instant never yields a
	// second retry chain or a second dead letter for a record; it costs at most a repeat of
	// the attempts in flight. That needs brokers with transactions (Kafka 0.11+, a
	// transaction coordinator; on secured clusters, Write and Describe on the transactional
	// ids <TransactionalIDPrefix>/<ConsumerGroup>/*) and Sarama.Version at least 2.5.0.
	// With AtLeastOnce the retry or dead letter is written first and the offset committed
	// after it: a crash between the two hands the record to the next owner, which starts a
	// second retry chain (or writes a second dead letter) for it.
	AtLeastOnce bool
	// TransactionalIDPrefix begins the transactional id of each claimed partition's producer:
	// <prefix>/<ConsumerGroup>/<topic>/<partition>. The id is fixed per partition so that the
	// partition's next owner fences the previous one (and aborts what a crashed one left
	// open). Default "millrace".
	TransactionalIDPrefix string
	// TransactionTimeout is how long the brokers let a transaction stay open before they abort
	// it (Kafka's transaction.timeout.ms). A healthy transaction lasts a produce and a commit
	// round trip, longer while sarama retries its requests; one that outlasts this is aborted
	// by the brokers and written again. It also bounds how long a transaction left open by a
	// process that died in the middle of a commit (after the offsets, before the end) holds
	// back its partitions: their next owner's stable offset fetch waits for it, and its
	// session fails and rejoins until the brokers abort it. Default 10 s.
	TransactionTimeout time.Duration
	// Sarama is the base client configuration (version, TLS, SASL, timeouts). Default
	// sarama.NewConfig(). The adapter overrides, on a copy, the settings its guarantees depend
	// on: acks=all and synchronous producer results, no topic auto-creation from metadata
	// requests, offsets from the oldest record for a new group, auto-commit off and
	// consumer errors returned. It also raises the rebalance timeout from Sarama's 60 s to
	// DefaultRebalanceTimeout (5 min) unless another value is set: a handler slower than the
	// rebalance timeout gets its member evicted during a rebalance and its record handled twice. Sarama's metrics are recorded only in the MetricRegistry of a
	// configuration given here; with the default, none are (they cost CPU on every request).
	Sarama *sarama.Config
	// Logger receives subscription and commit problems. Default slog.Default().
	Logger *slog.Logger
}

// DefaultRebalanceTimeout replaces Sarama's 60 s Consumer.Group.Rebalance.Timeout: how long
// the group waits in a rebalance for a member to finish its records in flight before it evicts
// the member (whose records are then handled again by the next owner). It must exceed the
// longest time a handler may take on one record, retry publish included; set
// Config.Sarama.Consumer.Group.Rebalance.Timeout (to anything but 60 s) to choose another.
const DefaultRebalanceTimeout = 5 * time.Minute

// Validate checks every field; it returns a *millrace.ConfigError.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return &millrace.ConfigError{Field: "kafka.Config.Brokers", Value: "[]", Rule: "must list at least one host:port"}
	}
	for i, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			return &millrace.ConfigError{Field: "kafka.Config.Brokers[" + strconv.Itoa(i) + "]", Value: strconv.Quote(b), Rule: "must be host:port"}
		}
	}
	if c.ConsumerGroup == "" {
		return &millrace.ConfigError{Field: "kafka.Config.ConsumerGroup", Value: `""`, Rule: "is required (one group per service)"}
	}
	type check struct {
		field string
		bad   bool
		value string
		rule  string
	}
	for _, k := range []check{
		{"Partitions", c.Partitions < 0, itoa32(c.Partitions), "must not be negative (0 means 1)"},
		{"RetryPartitions", c.RetryPartitions < 0, itoa32(c.RetryPartitions), "must not be negative (0 means as many as the source topic)"},
		{"ReplicationFactor", c.ReplicationFactor < -1, strconv.Itoa(int(c.ReplicationFactor)), "must be -1 or 0 (broker default) or positive"},
		{"RetryRetention", c.RetryRetention < 0, c.RetryRetention.String(), "must not be negative (0 means 7 days)"},
		{"DeadLetterRetention", c.DeadLetterRetention < 0, c.DeadLetterRetention.String(), "must not be negative (0 means unlimited)"},
		{"MaxDelay", c.MaxDelay < 0, c.MaxDelay.String(), "must not be negative (0 means 24h)"},
		{"MaxTiers", c.MaxTiers < 0, strconv.Itoa(c.MaxTiers), "must not be negative (0 means 8)"},
		{"MaxInFlight", c.MaxInFlight < 0, strconv.Itoa(c.MaxInFlight), "must not be negative (0 means 16)"},
		{"CommitInterval", c.CommitInterval < 0, c.CommitInterval.String(), "must not be negative (0 means 10ms)"},
		{"NackDelay", c.NackDelay < 0, c.NackDelay.String(), "must not be negative (0 means 500ms)"},
		{"ReconnectDelay", c.ReconnectDelay < 0, c.ReconnectDelay.String(), "must not be negative (0 means 250ms)"},
		{"TransactionTimeout", c.TransactionTimeout < 0, c.TransactionTimeout.String(), "must not be negative (0 means 10s)"},
		{"TransactionalIDPrefix", strings.ContainsAny(c.TransactionalIDPrefix, " \t\n"), strconv.Quote(c.TransactionalIDPrefix), "must not contain white space"},
	} {
		if k.bad {
			return &millrace.ConfigError{Field: "kafka.Config." + k.field, Value: k.value, Rule: k.rule}
		}
	}
	if c.Sarama != nil && c.Sarama.Producer.Transaction.ID != "" {
		return &millrace.ConfigError{Field: "kafka.Config.Sarama.Producer.Transaction.ID", Value: strconv.Quote(c.Sarama.Producer.Transaction.ID),
			Rule: "must be empty: the adapter names one transactional producer per partition (set TransactionalIDPrefix)"}
	}
	if c.Sarama != nil {
		strategies := c.Sarama.Consumer.Group.Rebalance.GroupStrategies
		if s := c.Sarama.Consumer.Group.Rebalance.Strategy; s != nil { //nolint:staticcheck // the deprecated field still takes effect
			strategies = append(strategies, s)
		}
		for _, s := range strategies {
			if s != nil && s.Name() == sarama.CooperativeStickyBalanceStrategyName {
				return &millrace.ConfigError{Field: "kafka.Config.Sarama.Consumer.Group.Rebalance.GroupStrategies", Value: s.Name(),
					Rule: "must not be cooperative: the adapter ends a claim's work with its session, and a cooperative rebalance keeps claims running into a new generation"}
			}
		}
	}
	if !c.AtLeastOnce && c.Sarama != nil && !c.Sarama.Version.IsAtLeast(sarama.V2_5_0_0) {
		return &millrace.ConfigError{Field: "kafka.Config.Sarama.Version", Value: c.Sarama.Version.String(),
			Rule: "must be at least 2.5.0 for transactions (generation-fenced offset commits, stable offset fetches); set AtLeastOnce for older brokers"}
	}
	d := c.withDefaults()
	if d.RetryRetention <= d.MaxDelay {
		return &millrace.ConfigError{Field: "kafka.Config.RetryRetention", Value: d.RetryRetention.String(),
			Rule: "must exceed MaxDelay (" + d.MaxDelay.String() + "), or retries expire before they are due"}
	}
	return nil
}

func itoa32(n int32) string { return strconv.Itoa(int(n)) }

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.RetryRetention == 0 {
		c.RetryRetention = 7 * 24 * time.Hour
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 24 * time.Hour
	}
	if c.MaxTiers == 0 {
		c.MaxTiers = 8
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 16
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 10 * time.Millisecond
	}
	if c.RetryLinger == 0 {
		c.RetryLinger = time.Millisecond
	}
	if c.NackDelay == 0 {
		c.NackDelay = 500 * time.Millisecond
	}
	if c.ReconnectDelay == 0 {
		c.ReconnectDelay = 250 * time.Millisecond
	}
	if c.TransactionalIDPrefix == "" {
		c.TransactionalIDPrefix = "millrace"
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// saramaConfig returns a copy of the base client configuration with the settings the adapter's
// guarantees depend on.
func (c Config) saramaConfig() *sarama.Config {
	sc := sarama.NewConfig()
	if c.Sarama != nil {
		cp := *c.Sarama
		sc = &cp
	} else {
		// Nobody could read the metrics of a configuration the adapter made itself.
		sc.MetricRegistry = discardMetrics{}
	}
	if sc.ClientID == "" || sc.ClientID == "sarama" {
		sc.ClientID = "millrace"
	}
	// Topics are created by Provision only; a metadata request never creates one, so a missing
	// retry topic fails the publish instead of appearing with broker defaults.
	sc.Metadata.AllowAutoTopicCreation = false
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Consumer.Return.Errors = true
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	if !c.AtLeastOnce {
		// A retry or dead letter of an aborted transaction is never read; and a member
		// starting on a partition waits for a transaction committing its offset to finish
		// (a stable offset fetch), so it never starts below an offset just committed.
		sc.Consumer.IsolationLevel = sarama.ReadCommitted
	}
	// The subscription commits itself, right after each acknowledgement.
	sc.Consumer.Offsets.AutoCommit.Enable = false
	// A member learns of a rebalance at its next heartbeat: 1 s instead of 3 s lets a group
	// settle quickly when a subscription joins or leaves.
	// A rebalance waits for the records in the handler (see ConsumeClaim). Sarama's 60 s
	// default rebalance timeout is shorter than a slow handler's budget (the field report's
	// 104 s): the broker would evict the member mid-record and the next owner handle it again.
	// 5 min is Kafka's own max.poll.interval.ms default.
	if sc.Consumer.Group.Rebalance.Timeout == 60*time.Second {
		sc.Consumer.Group.Rebalance.Timeout = DefaultRebalanceTimeout
	}
	if sc.Consumer.Group.Heartbeat.Interval == 3*time.Second {
		sc.Consumer.Group.Heartbeat.Interval = time.Second
	}
	// Every connection goes through the guard (connguard.go), wrapping the dialer sarama would
	// have used, so that a silent connection loss costs one read timeout, not one per broker.
	var next dialer = &net.Dialer{Timeout: sc.Net.DialTimeout, KeepAlive: sc.Net.KeepAlive, LocalAddr: sc.Net.LocalAddr}
	if sc.Net.Proxy.Enable && sc.Net.Proxy.Dialer != nil {
		next = sc.Net.Proxy.Dialer
	}
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = newConnGuard(next)
	return sc
}
