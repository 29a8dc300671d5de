// Package kafka is millrace's Kafka adapter: non-blocking retry topics, attempt headers, and
// offsets committed only after a retry or dead letter is safely written.
//
// # Topology
//
// For a source topic T and a retry policy, Provision creates (never relying on broker
// auto-creation, which production clusters usually disable):
//
//	T                     the source topic, if missing (Config.Partitions partitions)
//	T.retry               the retry topic, when the policy has one distinct delay
//	T.retry.<delay>       one retry topic per distinct delay otherwise, e.g. T.retry.60s
//	T.dlq                 the dead-letter topic
//
// Retry and dead-letter topics get Config.RetryPartitions partitions, by default as many as T,
// so a key keeps its relative order within each topic. Retry topics keep records for
// Config.RetryRetention (7 days); the dead-letter topic for Config.DeadLetterRetention,
// unlimited by default (retention.ms=-1), so no dead letter expires unseen.
//
// Every record that reaches the handler can be dead-lettered intact, so Provision sizes the
// retry and dead-letter topics from T's effective max.message.bytes S (T's own, else the
// brokers' message.max.bytes): a dead letter carries the record with its header names
// escaped, millrace's state and the record keys, and in sarama's accounting (10 bytes for
// each header, however small) a record of nothing but empty headers grows about fivefold. The
// adapter's retries and dead letters of T go through a producer whose Producer.MaxMessageBytes
// is at least 5 S + 25 KiB (the record keys, error types and panic stack included), which
// bounds the largest record millrace writes from any record of T, and the retry and
// dead-letter topics get a max.message.bytes that holds a batch of that
// producer (about 5 MiB for Kafka's 1 MiB default). Topics that exist and are smaller are
// raised (IncrementalAlterConfigs; their other settings stay); when the brokers refuse,
// Provision fails, naming the topic and the size it needs, instead of leaving records to be
// redelivered forever. A Producer.MaxMessageBytes set in Config.Sarama is kept when it is
// larger and refused with a *millrace.ConfigError when it is smaller; a source topic whose
// records need more than a sarama produce request holds (sarama.MaxRequestSize) is refused.
//
// # Retry
//
// A Retry outcome republishes the record (key, payload and headers unchanged) to the retry topic
// of the smallest delay tier that is at least the requested delay, with headers for the next attempt, the original topic, partition, offset and key, the
// first-attempt time, the not-before time and the last error. The retry record and the
// original's offset commit in one transaction (see Offsets and transactions); with
// Config.AtLeastOnce the publish is synchronous and acknowledged by the brokers (acks=all),
// and only then is the original record acknowledged and committed.
//
// A delay is capped at the largest tier provisioned for T (the policy's longest backoff
// delay). A millrace.RetryAfter asking for longer is retried after that tier's delay, earlier
// than asked, and a warning is logged: a longer wait would hold up the tier's partition, and the
// topics are provisioned from the policy before any handler runs. Capabilities().MaxDelay is
// Config.MaxDelay (default 24 h), the limit for a policy's delays checked at start-up; the
// retry middleware caps RetryAfter at that value, not at the largest tier, so size the policy's
// longest delay for the longest RetryAfter your handlers ask for.
//
// Subscribe(ctx, T) consumes T and all of its retry topics as one consumer-group member, merged
// into one channel, so the same handler sees first attempts and retries. Each partition is
// read by its own goroutine and handed to a few long-lived workers, with up to
// Config.MaxInFlight records in the handler at once but
// never two of the same key (keyless records count as one key), so per-key order holds. A
// failing record never delays the records behind it: it leaves its partition for a retry topic,
// and while its retry is being published it gives up its place among the MaxInFlight to the
// records behind it.
// A record read from a retry topic
// is delivered no earlier than its not-before header (see Waiting retries), while heartbeats go
// on in the background and other partitions keep flowing; the wait ends at once when the group
// rebalances, leaving the record uncommitted for the next owner, which waits for the same
// not-before time.
//
// # Waiting retries
//
// Waiting retries hold nothing but their own partition: however many records wait and however
// long their delay, the source partitions are fetched and handled as if none did, and the
// consumer's memory does not grow with the number waiting.
//
// Sarama's consumer runs one fetch loop per broker, for all the partitions that broker leads:
// it sends the next fetch only when every partition has taken all of its part of the last
// response into its channel (Sarama's ChannelBufferSize, 256). A partition that takes nothing
// for Consumer.MaxProcessingTime (100 ms) is dropped from that response, but one that takes a
// record now and then, more often than that, holds the loop until it has taken them all. A
// retry partition read one record at a time as each comes due is such a partition: before
// this design, retries due a few milliseconds apart held their broker's fetch loop until the
// last record of the fetch came due, and every healthy partition led by that broker waited
// with them (goroutine dumps: the loop in its wait for the partitions' acknowledgements, the
// retry partition's feeder sending its records, the claim waiting for the next due time).
// Measured with 5,000 records/s on 3 partitions, 10 % failing once: healthy records waited up
// to 3.5 s from the moment 5 s retries came due, and the issue measured 7-20 s with 60 s ones.
//
// So a retry partition's claim only moves what Sarama fetched into a queue of its own, at
// once, and a second goroutine hands the queued records to the handler in offset order, each
// once due (the tier holds one delay, so due times rise with the offsets). The queue is bounded
// by pausing the partition (no more fetches for it) once it holds 256 records (or Sarama's
// ChannelBufferSize, if larger) and resuming it once half of them were handled; what was
// already on its way when it paused (the fetch in flight, at most Consumer.Fetch.Default bytes
// for the partition, and Sarama's channel) is still taken. So each retry partition holds at
// most about that many records and one fetch (1 MiB by default) in memory, whatever waits in
// the topic; the rest is read when its turn comes. A queued record is not admitted: no offset
// at or past it is committed, and after a rebalance or a crash the next owner reads it again
// and waits for the same due time. The records of a source partition are taken from Sarama as
// the handler admits them (up to MaxInFlight at once): a handler slower than the records
// arrive slows its broker's other partitions as with any Sarama consumer.
//
// TestWaitingRetriesHoldOnlyTheirPartition checks the property: a source partition and a
// retry partition led by one broker, a channel of one record, retries with a 5 s delay coming
// due every 30 ms; the healthy records published meanwhile must be handled within 2 s (they
// waited up to 4.5 s before; 17 ms after). BenchmarkRetryLatency measures it under load (an
// all-healthy run and a run with 10 % failing once, rounds interleaved, healthy p99 of the
// failing run over the all-healthy one, and how late retries arrive), BenchmarkRetryBacklog
// with a million retries waiting:
//
//	source .ci/services/kafka.sh
//	go test ./adapters/kafka/ -run '^$' -bench 'BenchmarkRetryLatency$' -benchtime 1x -timeout 60m \
//	    -kafka.latency.rates 5000 -kafka.latency.delays 1s,5s -kafka.latency.run 20s -kafka.latency.rounds 4
//	go test ./adapters/kafka/ -run '^$' -bench 'BenchmarkRetryLatency$' -benchtime 1x -timeout 60m \
//	    -kafka.latency.delays 60s -kafka.latency.run 90s -kafka.latency.rounds 2
//
// Measured at 5,000 records/s on the 3-broker kfake, on 2 cores shared with other test runs
// (load average 10-19, so the absolute figures move a lot; ratios min / median / max), the
// code before this design first: 5 s delay, 20 s runs, 4 rounds: healthy p99 3.2-3.8 s,
// ratio to the all-healthy run 16.3 / 18.8 / 38.7, retries late at p99 0.34 / 2.2 / 2.7 s,
// 0.86-0.98 of the healthy records offered consumed; now 98-832 ms, ratio 2.2 / 3.7 / 5.7,
// retries late at p99 48 / 74 / 217 ms, all consumed. 60 s delay, 90 s runs: healthy p99
// 10.1 s (max 10.7 s, ratio 22.9, one round) before; now 184 and 210 ms (max 400 ms, ratios
// 2.19 and 2.22), retries late at most 223 ms (p99 69 and 98 ms). 1 s delay, now: ratio
// 0.72 / 0.98 / 1.01. A later run on a quieter machine (load average 3-4, 3 rounds): 5 s delay
// ratio 0.73 / 0.88 / 8.5 (healthy p99 9.4-232 ms), retries late at p99 2.5 / 3.0 / 42 ms; 1 s
// delay 1.4 / 2.9 / 7.1; 15,000 records/s, 2 rounds: 1 s delay 1.3 and 4.6 (healthy p99 14 and
// 49 ms), 5 s delay 0.57 and 2.5 (25 and 33 ms), retries late at p99 7-13 ms, all consumed.
// What is left of the ratio above 1 is CPU: in goroutine
// dumps during those spikes every source claim waits for a free MaxInFlight slot, and no
// fetch loop waits on a retry partition. With 1,000,000 retries waiting (BenchmarkRetryBacklog
// on a kfake of its own, 2 rounds) the live heap peaked at 13.1 and 14.5 MiB against 3.2 and
// 3.3 MiB with none, and healthy records were not slower (p99 ratio 0.49 and 0.90).
//
// # Offsets and transactions
//
// Sarama's periodic auto-commit is off. An offset is committed only when its record and every
// earlier record of its partition were acknowledged (success, discard, retry or dead letter
// handed off). Each acknowledgement wakes the partition's committer, which commits at once,
// then at most once per Config.CommitInterval (10 ms by default): acknowledgements that arrive
// while a commit is in flight or within the interval share the next one. Commits never wait
// behind a fetch: they go over connections of their own (a broker answers one connection's
// requests in order, and a fetch long-poll waits up to Consumer.MaxWaitTime, 500 ms).
//
// By default each claimed partition has a transactional producer (transactional id
// <TransactionalIDPrefix>/<ConsumerGroup>/<topic>/<partition>), and a failing record's retry or
// dead letter is not published on its own: it is staged, and the partition's next
// transaction writes it together with the offset past its source record (and the offsets of
// the records acknowledged meanwhile). Every topic is read read_committed. So a retry record
// is visible exactly when its source record is committed: a crash at any instant leaves either
// both or neither, and a record never gets a second retry chain or a second dead letter. A
// transaction that fails is aborted (nothing of it is visible) and written again every
// Config.NackDelay, logging a warning, until it commits or the partition moves. The next owner
// of a partition (after a rebalance, or a restart after a crash) fences the previous owner's
// producer when it starts its own, which aborts a transaction the previous owner left open
// (but see Crashes). The brokers need transactions (Kafka 0.11+; on secured clusters, Write
// and Describe on the transactional ids) and Config.Sarama.Version at least 2.5.0. A
// producer that can write no more (fenced by a new owner, or in a fatal state such as an
// expired transactional id) ends its claim, which ends the session: the member rejoins, and
// the partition's owner starts a new producer under the new generation.
//
// Config.AtLeastOnce turns transactions off: the retry or dead letter is published first
// (synchronously, acknowledged by the brokers, through a producer that lingers up to
// Config.RetryLinger so that many failing records share produce requests) and the offset
// committed after; a publish that fails nacks the record, whose offset does not advance, and
// the subscription delivers it again after Config.NackDelay, counting one more attempt.
// Config.SyncCommit then commits synchronously on every acknowledgement that advances the mark
// (the commit completes before that worker takes the next record of the same key).
//
// A rebalance waits for a record in flight to be acknowledged and commits it before the
// partition moves, for up to the group's rebalance timeout, raised from Sarama's 60 s to
// DefaultRebalanceTimeout (5 min): a handler slower than that gets its member evicted and its
// record handled again by the next owner. Closing a subscription does not cancel the handlers
// running: their context stays live, their verdict counts (a retry is written, the record
// committed), and Close waits for them.
//
// A record whose retry or dead letter can never be written (topic deleted, ACL) holds its
// partition's committed offset back: at-least-once, it is redelivered every Config.NackDelay;
// transactional, its transaction is written again every NackDelay. Records of other keys go
// on only until 16*Config.MaxInFlight records wait unmarked; then the partition stops taking
// records and logs a warning naming the stuck record every 30 s, until it is acknowledged.
//
// Past the last record of a partition written in transactions (the retry and dead-letter
// topics) lie commit markers that no consumer receives, so a group that consumed everything
// there shows a lag of one per transaction after its last record until the next record
// arrives, as with every Kafka consumer that commits the offset after its last record; count
// what a read_committed reader gets past the committed offset to tell real lag.
//
// # Crashes
//
// What a SIGKILL of a consumer process costs (the kill battery, conformance/killbattery,
// enforces it in kill_test.go): nothing is lost and nothing is left uncommitted once a
// consumer runs again. A kill repeats the records its process had taken but not committed:
// those in flight or waiting behind one (at most (16+1)*MaxInFlight per claimed partition)
// and those acknowledged within the last CommitInterval and the commit in flight (while
// commits fail, the partition stops admitting records once 16*MaxInFlight of them wait);
// their handlers run again with the same attempt
// number (the attempt lives in the record), so a kill costs no attempt and a record whose
// handler succeeds is never dead-lettered. Transactional (the default), a kill never yields a
// second retry chain or a second dead letter for a record; at-least-once, a kill between a
// retry or dead letter and its source offset's commit hands the record to the next owner,
// which writes a second retry or dead letter for it (one per claimed partition and kill).
// Records a handler publishes itself (through Publisher or any producer) are not in the
// transaction: a repeated handler call publishes them again; nor is a dead letter written to a
// store by deadletter/sink (its Put runs before the transaction), which a kill can store
// twice. A transaction whose commit reached the brokers while its answer was lost (the
// coordinator failing over in that instant) is written again as a new one, which can
// duplicate its retries and dead letters. The next owner of a partition fences and aborts a
// transaction a crashed owner left open when it starts its producer, except one that had sent
// its offsets and not its end: that one holds the partition's offset fetch until the brokers
// abort it after Config.TransactionTimeout, and the member's sessions fail and rejoin
// meanwhile. Cooperative rebalancing is refused at start-up (Validate): a claim would keep
// running into a new generation with the old one's producer.
//
// # Connection loss
//
// Every connection (the group's fetches and heartbeats, the commits, the transactional and
// retry producers, the admin) is sarama's, with its timeouts: a connection that dies is
// redialled at the next request, and one that goes silent (a black hole: a dropped NAT entry,
// a partition) fails its requests after Sarama.Net.ReadTimeout (30 s by default). The adapter
// dials them all through a guard (wrapping Sarama.Net.Proxy.Dialer if one is set, else the
// dialer sarama would make): a read that times out while a reply was awaited closes that
// connection and every idle one of the adapter's clients, to any broker, not heard from since
// (a black hole cuts the path, not one broker), and refuses the next request on any connection
// that has not answered since, so sarama redials them all at once instead of finding each
// dead connection by a read timeout of its own. A JoinGroup or SyncGroup is exempt: the
// coordinator holds it until the whole group has rejoined (up to the rebalance timeout, 5 min),
// and sarama gives it no more than ReadTimeout like any request, so a rebalance waiting for a
// slow handler times it out, and sarama fails it and joins again, as without the guard; the
// guard reads the request's API key from the frame it writes and takes no such timeout for a
// silent path (TestGuardIgnoresJoinGroupWaitingForASlowMember: a rebalance of 8 s against a
// 2 s ReadTimeout, 3 JoinGroup timeouts, no connection closed; the guard before the exemption
// closed every idle connection of the joining member's clients 3 times). Over TLS the guard
// sees records, not frames, and a JoinGroup outlasting ReadTimeout still closes the idle
// connections (they are redialled; nothing is lost): keep ReadTimeout above the longest
// rebalance expected there, or accept the reconnects. DNS lookups
// (Net.ResolveCanonicalBootstrapServers) are not guarded. While the brokers are unreachable nothing is
// committed: a transaction (or a retry publish) that fails is written again, nothing of it
// visible, and the records stay with the partition. So a cut loses nothing and writes no retry
// or dead letter twice (transactional); a record whose commit the cut swallowed is handled
// again (the records taken and not yet committed, as for a crash below), with the same attempt
// number. The consumer resumes by itself within ReadTimeout plus a group rejoin, on any number
// of brokers: the cut battery (conformance/cutbattery, cut_test.go: resets of 2 s and black
// holes of 4 s, six cuts, on dead-letter and retry hand-offs and acknowledgements, with a 5 s
// ReadTimeout; bound ReadTimeout + 10 s) measured on the 3-broker cluster, three runs: at most
// 3.1 s to resume transactional and 3.4 s at-least-once, 0 lost, 0-3 duplicates, every
// black-holed connection closed within 5.5 s; with the group-request exemption, two runs on a
// loaded machine: at most 3.13 s and 3.72 s, 0 lost, 0-5 duplicates (the same session without
// the exemption: 3.33 s and 3.50 s). Without the guard, on the same cluster, each
// broker's connection was found silent on its own when next used (the fetch, the coordinator
// lookup, a metadata request, a produce), one read timeout after another: 13.4 s to resume
// typically, up to 18.4 s, and 16.5 s with 196 duplicates in a run next to the guarded ones;
// on one broker at most 5.2 s. The dead-letter store (NewDeadLetterStore, OpenDeadLetterStore)
// does not add the guard.
//
// # Attempts
//
// Kafka keeps no delivery counter: the attempt lives in headers (see millrace.HeaderAttempt and
// HeaderOriginalPartition, HeaderOriginalOffset), read only on retry topics (see Untrusted
// input): a record on the source topic is the first attempt. On a retry topic an attempt
// header that is present but not a positive decimal integer, and a record without any attempt
// header, are undecodable: the record is dead-lettered at once as malformed with its bytes unchanged, so no
// header can buy a message more attempts than the policy allows. A huge attempt number is
// dead-lettered as exhausted. Spring Kafka's headers are read when millrace's are absent:
// retry_topic-attempts (4-byte, or in old versions 1-byte, big-endian), kafka_original-topic,
// kafka_original-partition (4-byte big-endian), kafka_original-offset (8-byte big-endian),
// retry_topic-backoff-timestamp and kafka_exception-message, so records moved onto a retry
// topic with Spring's headers keep their count.
//
// # Untrusted input
//
// Everything a record carries is untrusted; on Kafka the rules hold as follows.
//
//   - Retry state is read only from millrace's retry topics (T.retry*). On the source topic a
//     record is always attempt 1 of MaxAttempts: millrace-attempt, retry_topic-attempts, the
//     origin, original-topic, first-attempt and last-error headers a producer sends there are
//     its content, handed to the handler and kept in the dead letter, never state. A retry
//     record keeps the source record's headers first, unchanged, and ends with millrace's
//     state and HeaderOriginalHeaders (how many leading headers are the original's); attempt
//     state is read only from the headers after that count, so copied content cannot pose as
//     state either. A count that does not fit the record makes it malformed.
//   - Attempt numbers saturate at MaxAttemptNumber and lie in [1, MaxAttempts] for the handler;
//     no header yields more handler calls than MaxAttempts (NackDelay redeliveries included).
//   - Decoding allocates in proportion to the headers present; there is no count to trust.
//   - A dead letter of a consumed record holds the record exactly: the value, the key, and the
//     original headers first, in order, with repeated names and binary values kept, each name
//     escaped with deadletter.EscapeKey, then millrace's state and the source record's origin
//     (HeaderOriginalPartition, HeaderOriginalOffset, HeaderOriginalTimestamp) under the names
//     the original headers do not carry (a foreign header keeps its name and value alone: state
//     never doubles or overrides it), the record keys with the origin again as KeyOriginTopic,
//     KeyOriginPartition and KeyOriginOffset (unforgeable; DeadLetterOrigin reads them), and
//     KeyOriginalHeaders. A handler's changes to the message's metadata are not in it.
//     DeadLetterStore gives the original headers back in Record.Native when they repeat
//     a name.
//
// The remaining limits: the retry topics are millrace's. A producer with write access to
// T.retry* is trusted like millrace (its attempt headers count, still capped at MaxAttempts,
// and an unreadable or missing one is malformed, and a record it writes there may be too
// large to dead-letter); restrict writes to them with ACLs. And the sizing counts a record's
// bytes as its batch holds them: a producer that compressed its batch may send a record that
// is larger uncompressed than T's max.message.bytes, and its copies fit only as far as
// Config.Sarama's compression (none by default) shrinks them again.
//
// Redeliveries after a nack within one subscription count as attempts too (NativeCount), so in
// AtLeastOnce mode a record whose retry cannot be published still reaches its dead letter
// after MaxAttempts calls. In transactional mode the handler is not called again: the
// transaction is written again until it commits, and the partition stalls meanwhile.
//
// # Brokers
//
// Config.Brokers lists the bootstrap brokers. The tests read MILLRACE_KAFKA_BROKERS (default
// 127.0.0.1:19092); `source .ci/services/kafka.sh` starts a 3-broker Kafka-protocol cluster
// (kfake, tools/kfakebroker) on 127.0.0.1:19092-19094 and exports all three, with its admin
// endpoint (it moves partition leaders) in MILLRACE_KAFKA_ADMIN. The whole package, the
// conformance suite, scenarios and batteries included, runs against that cluster.
//
// # At scale: leaders and rebalances
//
// Every partition (source, retry, dead-letter) has its own leader, so one topic's records are
// served by several brokers; the group coordinator and each transactional id's coordinator
// are single brokers too. Nothing in the adapter assumes one broker: sarama finds each
// partition's leader from the metadata and follows it when it moves.
//
// A leader move (an election after a broker restart, a reassignment, a preferred-leader
// election) is not a rebalance: the member keeps its partitions, nothing is redelivered and
// nothing committed is lost. The old leader answers the next fetch or produce with
// NOT_LEADER_OR_FOLLOWER; the producers (publisher, retry and transactional) retry after
// Sarama.Producer.Retry.Backoff (100 ms) with fresh metadata, and the consumer gives the
// partition up, waits Sarama.Consumer.Retry.Backoff (2 s) and fetches from the new leader. So
// a partition's records, and retries due meanwhile, wait up to Consumer.MaxWaitTime +
// Consumer.Retry.Backoff + (Metadata.Retry.Max+1) x Metadata.Retry.Backoff, 3.5 s with
// sarama's defaults (the test allows 1 s more for a loaded machine); a smaller
// Consumer.Retry.Backoff in Config.Sarama shortens it. Moves of one partition closer together
// than Consumer.Retry.Backoff add up: the consumer can reach the previous new leader just
// after it lost the partition again (measured 4.6 s with moves 2 s apart).
//
// A rebalance (a member joins, leaves or dies) stops the group's partitions: the members learn
// of it at their next heartbeat (1 s, see Config), finish and commit the records in flight,
// and the new owners start a transactional producer per partition before fetching; a slow
// handler holds the rebalance up to DefaultRebalanceTimeout (see "Offsets and transactions").
// A retry's wait does not survive the move of its retry partition: the new owner reads the
// record again and waits only what is left of its delay.
//
// Measured on the 3-broker kfake (leader_move_test.go, 3 partitions, 850 records at 50/s,
// every other failing once with a 2 s retry delay, -race on a shared 2-core machine):
// TestLeaderMoveWhileRetriesWait moves the leader of every source and retry partition three
// times, 5 s apart: 0 lost, 0 duplicates, 0 dead letters, first attempts delayed at most
// 2.5 s, retries at most 3.4 s past their due time, publishes at most 129 ms (5 runs).
// TestRebalanceWhileRetriesWait lets a second member join and leave twice: 0 lost,
// 0 duplicates, 0 dead letters, first attempts delayed at most 0.84 s, retries at most
// 0.73 s late (5 runs; the bound it checks is heartbeat + Consumer.MaxWaitTime + 2 s).
//
//	. .ci/services/kafka.sh && CI=true go test -race -count=1 -v \
//	    -run 'TestLeaderMoveWhileRetriesWait|TestRebalanceWhileRetriesWait' ./adapters/kafka/
//
// A cut of every connection costs one Sarama.Net.ReadTimeout on several brokers as on one:
// the adapter's connection guard closes every broker's silent connection at the first timeout
// (see "Connection loss": 3.4 s at most to resume on 3 brokers; without the guard each
// broker's connection timed out on its own, up to 18.4 s). Coordinator
// moves (a broker holding a group or transaction coordinator going away) are not measured: on
// kfake they are cluster-wide and would disturb every test sharing the cluster; the cut
// battery covers a coordinator that stops answering. The whole package (go test -race) took
// 277-281 s on the 3-broker cluster, these two tests included (43 s), and 229 s on one broker
// without them.
//
// # Opening by URL, dead-letter store, plan
//
// Importing the package registers kafka:// with brokerurl's default Mux:
//
//	brokerurl.OpenAdapter(ctx, "kafka://user:password@b1:9092,b2:9092?group=billing&tls=true&sasl=scram-sha-512", brokerurl.Options{})
//
// The query parameters: group (ConsumerGroup, required to consume), at_least_once,
// transactional_id_prefix, partitions, replication_factor, version (Sarama.Version, at least
// 2.5.0 unless at_least_once=true), dial_timeout and read_timeout (Sarama.Net; the CLI's
// operations client otherwise dials 10 s, reads 15 s and gives up connecting after 30 s, and
// opening returns when its context ends); TLS with tls=true, tls_ca, tls_cert and tls_key (PEM files),
// tls_server_name, tls_insecure_skip_verify; SASL with sasl=plain, scram-sha-256 or
// scram-sha-512 and the user and password of the URL's userinfo (percent-encoded; never a
// parameter, so that errors and logs hide it). Every client the adapter builds (admin,
// producers, the consumer group, the transactional producers, the dead-letter store's) carries
// the same TLS and SASL settings. Any other parameter, a path or a fragment is an error that
// names it. The dead-letter topic is a deadletter.Store (DeadLetterStore: removals are marks in
// "<dlq>.replayed"); `millrace dlq topics` lists the topics named <topic>.dlq with their depth;
// `millrace plan --check` reads the topics' retention.ms and max.message.bytes.
package kafka
