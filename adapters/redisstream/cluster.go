package redisstream

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/redisslot"
)

// CheckClusterSlots refuses a stream that cannot work on a Redis Cluster: one whose dead-letter
// stream (Config.DeadLetterStream) or retry schedule would hash to another slot than the stream.
// The adapter's Lua scripts touch the stream with one of them at once (dead-lettering, retries),
// and a cluster refuses such a script with CROSSSLOT: its entries would be recovered and fail
// again every MinIdle, never retried on time nor dead-lettered. The error is a
// *millrace.ConfigError that names the keys, their slots and the fix: a hash tag in the stream's
// name ("{orders}.events": its default dead-letter stream "{orders}.events.dlq" and its retry
// schedule keep the tag) or a Config.DeadLetterStream that keeps the stream's slot.
//
// The check needs no server: slots are computed from the names. Provision and Subscribe make
// it when the adapter's client is a *redis.ClusterClient, before creating anything; on any other
// client it is never made (one Redis has no slots), but a test or a deployment check can call it
// to know that a configuration will also run on a cluster.
func (a *Adapter) CheckClusterSlots(stream string) error {
	ss := redisslot.Of(stream)
	dlq, schedule := a.DeadLetterTopic(stream), a.retryKey(stream)
	ds, rs := redisslot.Of(dlq), redisslot.Of(schedule)
	if ds == ss && rs == ss {
		return nil
	}
	key := func(role, name string, slot uint16) string {
		return fmt.Sprintf("%s %s (slot %d)", role, strconv.Quote(name), slot)
	}
	var apart []string
	if ds != ss {
		apart = append(apart, key("dead-letter stream", dlq, ds))
	}
	if rs != ss {
		apart = append(apart, key("retry schedule", schedule, rs))
	}
	rule := "on a Redis Cluster a stream must share its hash slot with its dead-letter stream and its retry schedule (the adapter's scripts touch them together, and the cluster refuses them with CROSSSLOT): " +
		key("stream", stream, ss) + ", but "
	for i, k := range apart {
		if i > 0 {
			rule += " and "
		}
		rule += k
	}
	fix := "; give the stream a hash tag, e.g. " + strconv.Quote(tagged(stream)) +
		" (the default dead-letter stream <stream>.dlq and the retry schedule keep the tag)"
	if ds != ss && rs == ss {
		fix += ", or set redisstream.Config.DeadLetterStream to a name with the stream's slot"
	}
	if rs != ss {
		// Only a stream with a '}' and no hash tag ("a}b", "{}x") gets here: its schedule's tag
		// cannot reproduce the stream's whole-name hash.
		fix += "; a name with a '}' but no non-empty {tag} before it cannot share a slot with any retry schedule"
	}
	return &millrace.ConfigError{Field: "redisstream stream name", Value: strconv.Quote(stream), Rule: rule + fix}
}

// tagged suggests a hash-tagged name for stream: "payments.events" gives "{payments}.events",
// "payments" gives "{payments}"; a name that holds braces already gives the documentation's
// example.
func tagged(stream string) string {
	if stream == "" || strings.ContainsAny(stream, "{}") {
		return "{orders}.events"
	}
	if head, tail, ok := strings.Cut(stream, "."); ok && head != "" {
		return "{" + head + "}." + tail
	}
	return "{" + stream + "}"
}

// onCluster reports whether the adapter's client is a Redis Cluster client.
func (a *Adapter) onCluster() bool {
	_, ok := a.client.(*redis.ClusterClient)
	return ok
}
