// Package cutbattery is the connection-cut battery (issue #13): a fault proxy on loopback
// between a consumer and its broker cuts every connection mid-stream for a few seconds and
// restores it, several times, also while retries and dead letters are being written, and the
// battery checks that the consumer resumes by itself within its stated time, loses nothing,
// never acknowledges a message whose retry or dead letter was not written, and duplicates
// within its stated bound.
//
// # The faults
//
// Proxy forwards 127.0.0.1:<port> to one loopback upstream. Cut breaks it in one of two ways;
// the battery alternates them:
//
//   - Reset: every open connection is reset (RST to both sides) and every connection opened
//     during the cut is reset when accepted. The client learns at once; this tests reconnecting
//     and what a write does when its connection dies under it.
//   - BlackHole: every open connection, and every connection opened during the cut, goes silent
//     for good: nothing either side sends is delivered, nothing is answered, and the proxy never
//     closes it, not even after Restore (only new connections work then). This is the 3 a.m.
//     one (a firewall or NAT that forgot the connection, a partition that outlasted TCP): only
//     the client's own timeouts get it out, so it tests that the adapter has them, and that
//     they are short enough.
//
// The proxy is this package's own, not toxiproxy (v2.5.0), because toxiproxy cannot do the
// second: its toxics apply to all connections of a proxy, new ones included, so the
// connections a black hole caught cannot stay silent while new ones work; removing its timeout
// toxic closes them, which hands the client an end of stream no dropped NAT entry ever sends,
// and a client without timeouts of its own would pass. Its reset is Stop/Start, which frees the
// listening port during the cut.
//
// # A run
//
// Run starts a Proxy per Target.Upstreams address, connects the Target through them, and
// runs the battery's handler through router.New with the policy {MaxAttempts 3, Fixed(500ms)}
// by default. A publisher sends one message every 50 ms over an uncut connection (so every
// message the battery counts exists on the broker, and messages keep arriving during the
// cuts): per ten, six that succeed, two that fail their first call (a retry), one that always
// fails (three calls, then a dead letter, reason exhausted) and one the handler calls
// millrace.Malformed (a dead letter at once). Six cuts follow, 2 s of clean traffic before
// each: reset 2 s, black hole 4 s, alternately; the first and fourth are armed to fire inside
// the next handler call that returns a dead-letter outcome, the second and fifth inside one
// returning a retry, the third and sixth inside one that succeeds, so that the dead-letter
// write, the retry write or the ack that follows goes into the cut (a cut whose call does not
// come within 3 s fires mid-stream). After each Restore a probe message is published; the time
// from Restore to its first handler call is the cut's resumption time.
//
// Then the battery waits until every message succeeded or was dead-lettered, for
// Bound.Settle after the last Restore, and until the handler has been quiet for a second; it
// stops the router and asks the Target what the broker still holds (System.Pending).
//
// # What is checked
//
// Per message, from the handler's ledger and the dead letters read back:
//
//   - lost: neither a handler call that succeeded nor a dead letter. Must be 0. An ack without
//     its retry or dead letter written shows here: nothing delivers the message again.
//   - every dead letter has the published payload byte for byte, reason exhausted (at attempt
//     MaxAttempts or later) or malformed (only for the malformed messages);
//   - a message that would have succeeded was dead-lettered only if the broker had counted its
//     last attempt before the handler could succeed (counted in Result.DeadLetteredEarly);
//   - duplicates (Result.Duplicates): handler calls after the message's outcome was reached
//     (after a success; starting after its dead letter was written), calls repeating an
//     attempt number, dead letters beyond the first, dead letters of a message that
//     succeeded. At most Bound.DuplicatesPerCut times the number of cuts, plus what
//     System.ExtraDuplicates allows;
//   - attempts lost (Result.AttemptsLost): attempts the broker counted that no handler call
//     saw (a delivery lost with its connection). At most Bound.AttemptsLostPerCut per cut;
//   - resumption after every Restore within Bound.Resume;
//   - nothing pending on the broker at the end.
//
// Run logs one line per cut (kind, where it landed, resumption time, what the proxy saw: how
// many connections were reset or black-holed, how many of those the client closed by itself
// and how long the slowest took) and the counts line:
//
//	cutbattery redisstream: messages=758 cuts=6 (reset 3, black hole 3; on dead-letter write 2,
//	retry write 2, ack 2) handler_calls=1060 duplicates=0 (calls 0, dead letters 0; bound 64/cut)
//	lost=0 pending=0 dead_letters=150 (early 0) attempts_lost=2 (bound 64/cut)
//	max_resume=2.102s (bound 7s) elapsed=45s
//
// # Adding an adapter
//
// In the adapter's package, write a test file with a Target and a test named TestCutBattery
// that calls Run (adapters/redisstream/cut_test.go and adapters/amqp/cut_test.go are examples):
//
//   - Upstreams returns the broker's loopback address(es) (host:port), or skips the test (fails
//     it under CI=true) when the broker is unreachable. Several addresses (a cluster) get one
//     proxy each, all cut together.
//   - Connect builds the adapter so that every connection it makes goes to the proxied
//     address(es) given, in the same order: a Redis client's Addr, an AMQP URL's host, sarama's
//     Config.Net.Proxy (Enable, and a Dialer that maps each broker address to its proxy, since
//     Kafka brokers advertise their own addresses in metadata), an SQS client's endpoint URL. It returns a System: that adapter, a Publisher and a
//     DeadLetters subscriber on connections that are never cut (a second adapter on the
//     upstream address serves), Pending, and the Bound the adapter documents.
//   - Write the adapter's bound in its package documentation, in a section "Connection loss",
//     with where each number comes from, and build Bound from the same configuration.
//
// The battery needs about 45 s per target on a 2-core machine; targets of one package may run
// in parallel (the AMQP test runs both queue types at once).
package cutbattery
