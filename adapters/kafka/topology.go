package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace"
)

// ErrNotProvisioned is returned by ScheduleRetry for a topic whose retry topics this adapter
// has not provisioned (router.Run provisions every handler topic before subscribing).
var ErrNotProvisioned = errors.New("kafka: topic not provisioned on this adapter")

// RetrySuffix starts the name of every retry topic of a source topic.
const RetrySuffix = ".retry"

// tier is one retry topic and the delay it holds records for.
type tier struct {
	topic string
	delay time.Duration
}

// RetryTopics names the retry topics of topic for the given distinct delays: topic.retry for
// one delay, topic.retry.<delay> (e.g. push.requested.retry.60s) for each of several.
func RetryTopics(topic string, delays []time.Duration) []string {
	if len(delays) == 1 {
		return []string{topic + RetrySuffix}
	}
	out := make([]string, len(delays))
	for i, d := range delays {
		out[i] = topic + RetrySuffix + "." + delayName(d)
	}
	return out
}

// delayName writes d in the largest whole unit among s, ms and ns, so names stay short and
// valid topic characters: 60s, 1500ms, 250ns.
func delayName(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	default:
		return strconv.FormatInt(int64(d), 10) + "ns"
	}
}

// delayFromName reads the delay a retry topic name carries (source.retry.60s), 0 if none.
func delayFromName(name, source string) time.Duration {
	d, err := time.ParseDuration(strings.TrimPrefix(name, source+RetrySuffix+"."))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// isRetryTopicOf reports whether name is one of source's retry topics.
func isRetryTopicOf(name, source string) bool {
	return name == source+RetrySuffix || strings.HasPrefix(name, source+RetrySuffix+".")
}

// Provision creates topic (if missing), its retry topics (one per distinct delay of policy) and
// its dead-letter topic, and waits until the brokers report all of them. It is idempotent:
// existing topics keep their settings, except that a retry or dead-letter topic whose
// max.message.bytes is too small for the largest retry or dead letter a record of topic can
// make is raised to fit (see the package documentation); Provision fails, naming the topic
// and the size, when the brokers refuse.
func (a *Adapter) Provision(ctx context.Context, topic string, policy millrace.RetryPolicy) error {
	if err := policy.ValidateFor(a.Capabilities()); err != nil {
		return err
	}
	admin, err := a.clusterAdmin()
	if err != nil {
		return err
	}
	parts, err := a.ensureSource(admin, topic)
	if err != nil {
		return err
	}
	if err := a.awaitTopics(ctx, admin, []string{topic}); err != nil {
		return err
	}
	limits, err := a.topicMaxMessageBytes(admin, []string{topic})
	if err != nil {
		return err
	}
	size, err := a.sizeFor(topic, limits[topic])
	if err != nil {
		return err
	}
	maxBytes := strconv.FormatInt(size.topicLimit, 10)
	if a.cfg.RetryPartitions > 0 {
		parts = a.cfg.RetryPartitions
	}
	delays := policy.DistinctDelays()
	names := RetryTopics(topic, delays)
	tiers := make([]tier, len(delays))
	retention := strconv.FormatInt(a.cfg.RetryRetention.Milliseconds(), 10)
	for i, name := range names {
		tiers[i] = tier{topic: name, delay: delays[i]}
		if err := a.createTopic(admin, name, parts, map[string]*string{"retention.ms": &retention, maxMessageBytesKey: &maxBytes}); err != nil {
			return err
		}
	}
	dlq := a.DeadLetterTopic(topic)
	dlqRetention := "-1" // unlimited: dead letters wait for an operator
	if a.cfg.DeadLetterRetention > 0 {
		dlqRetention = strconv.FormatInt(a.cfg.DeadLetterRetention.Milliseconds(), 10)
	}
	if err := a.createTopic(admin, dlq, parts, map[string]*string{"retention.ms": &dlqRetention, maxMessageBytesKey: &maxBytes}); err != nil {
		return err
	}
	written := append([]string{dlq}, names...)
	if err := a.awaitTopics(ctx, admin, written); err != nil {
		return err
	}
	// Topics that existed before keep their settings, but must take what millrace writes.
	if err := a.ensureMaxMessageBytes(admin, topic, written, size.topicLimit); err != nil {
		return err
	}
	p, err := a.sizedProducer(int(size.producer))
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.tiers[topic] = tiers
	a.sized[topic] = p
	a.mu.Unlock()
	return nil
}

// sizedProducer returns the retry producer whose Producer.MaxMessageBytes is limit, connecting
// it on first use.
func (a *Adapter) sizedProducer(limit int) (*producer, error) {
	a.mu.Lock()
	p, ok := a.byLimit[limit]
	closed := a.closed
	a.mu.Unlock()
	if ok || closed {
		if closed {
			return nil, millrace.ErrClosed
		}
		return p, nil
	}
	rc := *a.retryConf
	rc.Producer.MaxMessageBytes = limit
	np, err := newProducer(a.cfg.Brokers, &rc, a.retries.marsh)
	if err != nil {
		return nil, fmt.Errorf("kafka: connect retry producer to %v: %w", a.cfg.Brokers, err)
	}
	np.limit = limit
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		np.close()
		return nil, millrace.ErrClosed
	}
	if p, ok := a.byLimit[limit]; ok { // a concurrent Provision connected one first
		np.close()
		return p, nil
	}
	a.byLimit[limit] = np
	return np, nil
}

// clusterAdmin returns the adapter's admin client, connecting it on first use. It connects
// without holding a.mu (see backlogClient) and installs the connection under it.
func (a *Adapter) clusterAdmin() (sarama.ClusterAdmin, error) {
	a.mu.Lock()
	admin, closed := a.admin, a.closed
	a.mu.Unlock()
	if closed {
		return nil, millrace.ErrClosed
	}
	if admin != nil {
		return admin, nil
	}
	admin, err := sarama.NewClusterAdmin(a.cfg.Brokers, a.sc)
	if err != nil {
		return nil, fmt.Errorf("kafka: connect admin to %v: %w", a.cfg.Brokers, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		_ = admin.Close()
		return nil, millrace.ErrClosed
	}
	if a.admin != nil { // a concurrent Provision connected one first
		_ = admin.Close()
		return a.admin, nil
	}
	a.admin = admin
	return admin, nil
}

// ensureSource creates topic with Config.Partitions if it is missing and returns its partition
// count.
func (a *Adapter) ensureSource(admin sarama.ClusterAdmin, topic string) (int32, error) {
	md, err := admin.DescribeTopics([]string{topic})
	if err != nil {
		return 0, fmt.Errorf("kafka: describe topic %q: %w", topic, err)
	}
	if len(md) == 1 && errors.Is(md[0].Err, sarama.ErrNoError) && len(md[0].Partitions) > 0 {
		return int32(len(md[0].Partitions)), nil
	}
	if err := a.createTopic(admin, topic, a.cfg.Partitions, nil); err != nil {
		return 0, err
	}
	return a.cfg.Partitions, nil
}

func (a *Adapter) createTopic(admin sarama.ClusterAdmin, name string, partitions int32, configs map[string]*string) error {
	err := admin.CreateTopic(name, &sarama.TopicDetail{
		NumPartitions:     partitions,
		ReplicationFactor: a.cfg.ReplicationFactor,
		ConfigEntries:     configs,
	}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("kafka: create topic %q (%d partitions): %w", name, partitions, err)
	}
	return nil
}

// awaitTopics waits until every topic has partitions with leaders in the brokers' metadata, as
// a new topic can take a moment to appear on a real cluster.
func (a *Adapter) awaitTopics(ctx context.Context, admin sarama.ClusterAdmin, topics []string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		md, err := admin.DescribeTopics(topics)
		missing := ""
		if err != nil {
			missing = err.Error()
		}
		for _, t := range md {
			if !errors.Is(t.Err, sarama.ErrNoError) || len(t.Partitions) == 0 {
				missing = t.Name
				break
			}
		}
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: topics %v not ready (%s): %w", topics, missing, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tierFor returns the retry topic for a delay on source: the smallest delay tier at least d,
// or the largest tier when d exceeds them all (a longer wait would hold up that tier's
// partition). The second result is the tier's delay, the one the retry is scheduled with.
func (a *Adapter) tierFor(source string, d time.Duration) (tier, error) {
	a.mu.Lock()
	tiers := a.tiers[source]
	a.mu.Unlock()
	if len(tiers) == 0 {
		return tier{}, fmt.Errorf("%w: %q has no retry topics; call Provision first", ErrNotProvisioned, source)
	}
	for _, t := range tiers {
		if t.delay >= d {
			return t, nil
		}
	}
	return tiers[len(tiers)-1], nil
}

// retryTopics returns the retry topics a subscription to source consumes: every
// source.retry* topic on the cluster, those provisioned on this adapter with their delay, others
// (a policy changed since, or a tier provisioned by another instance) with the delay their name
// carries, so no pending retry is left behind. A provisioned retry topic that is gone from the
// cluster is left out with a warning: the source topic keeps flowing, and retries that need the
// missing topic fail and stay uncommitted until it is back.
func (a *Adapter) retryTopics(client sarama.Client, source string) map[string]time.Duration {
	out := map[string]time.Duration{}
	exists := map[string]bool{}
	if err := client.RefreshMetadata(); err == nil {
		if names, err := client.Topics(); err == nil {
			for _, n := range names {
				exists[n] = true
				if isRetryTopicOf(n, source) {
					out[n] = delayFromName(n, source)
				}
			}
		}
	}
	a.mu.Lock()
	tiers := a.tiers[source]
	a.mu.Unlock()
	for _, t := range tiers {
		if exists[t.topic] {
			out[t.topic] = t.delay
		} else {
			a.logger.Warn("kafka: provisioned retry topic is missing from the cluster; not consuming it",
				slog.String("topic", t.topic), slog.String("source", source))
		}
	}
	return out
}
