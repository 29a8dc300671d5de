// Package plan says, before a consumer ships, what millrace will do with a retry policy on each
// broker: the topology it provisions, when a message that keeps failing reaches its dead-letter
// destination, and whether the policy, the processing budget and the idempotency lease pass
// every rule the adapters enforce at start-up. The millrace CLI's plan command prints a Report.
//
// The package is broker-neutral. It never re-states a rule: each one is the result of the
// Validate method that owns it (millrace.RetryPolicy.ValidateFor against the adapter's
// Capabilities, router.Config.Validate, idempotency.Config.Validate, and each adapter's
// Config.Validate, called by that adapter's planner). Adapter packages build a BrokerPlan with
// New, add their topology, their delay rounding and their own rules, and brokerurl assembles
// the Report; plan.Build adds the give-up times and the side-by-side table of differences.
//
// # Spec
//
// A Spec is read from flags or from a small key=value file, one setting a line, with the
// flags' names; blank lines and lines starting with # are ignored:
//
//	# field report 3: push notifications
//	topic    = push.requested
//	attempts = 5
//	backoff  = fixed:60s
//	budget   = 50s
//	lease    = 2m
//
// Durations are Go durations (90s, 2m, 1h30m) or whole days (7d). Backoffs are written
//
//	fixed:60s                                            the same delay before every retry
//	delays:1s,10s,1m                                     one delay per retry, the last repeated
//	exponential:initial=1s,max=5m[,multiplier=2][,jitter=0.2]
//	none                                                 no retry (attempts = 1)
//
// and a bare duration (60s) means fixed.
package plan
