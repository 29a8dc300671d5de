package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// ClaimResult is the answer of Store.Claim.
type ClaimResult uint8

const (
	// Acquired means the caller now owns the message until the lease expires.
	Acquired ClaimResult = iota + 1
	// Done means the message was finished earlier: treat it as a duplicate and acknowledge it.
	Done
	// Busy means another owner holds a live lease: retry later.
	Busy
)

// String returns "ACQUIRED", "DONE" or "BUSY".
func (r ClaimResult) String() string {
	switch r {
	case Acquired:
		return "ACQUIRED"
	case Done:
		return "DONE"
	case Busy:
		return "BUSY"
	default:
		return fmt.Sprintf("ClaimResult(%d)", uint8(r))
	}
}

// DoneValue is the value a completed message's lease record holds. No owner may be "done".
const DoneValue = "done"

// DefaultPrefix is the key prefix a store uses when StoreOptions.Prefix is empty.
const DefaultPrefix = "millrace:"

// DefaultSentTTL is how long a fan-out progress set lives when StoreOptions.SentTTL is zero:
// 7 days, the field report's done TTL.
const DefaultSentTTL = 7 * 24 * time.Hour

// claimRounds bounds how often a Claim retries a lease that vanished between its write attempt
// and its read (Redis SET NX then GET, PostgreSQL INSERT then SELECT).
const claimRounds = 8

// Store keeps idempotency leases and per-recipient fan-out progress. Implementations are safe
// for concurrent use; their expiry semantics are those of Redis keys with a TTL.
type Store interface {
	// Claim takes the lease on key for owner for leaseTTL if nobody holds it (Acquired), or
	// reports Done when the message was finished, or Busy when another live lease exists.
	// Owners are unique per claim, so a lease held by owner from an earlier call is Busy too;
	// the exception is a lease this very call's write took whose reply was lost (a dropped
	// connection): an implementation that can tell it is its own (the Redis store: the lease
	// holds owner after its own SET NX may have run) reports it Acquired.
	Claim(ctx context.Context, key, owner string, leaseTTL time.Duration) (ClaimResult, error)
	// Complete marks key done for doneTTL if owner still holds the lease, else ErrLeaseLost.
	Complete(ctx context.Context, key, owner string, doneTTL time.Duration) error
	// Release deletes the lease if owner still holds it, else ErrLeaseLost.
	Release(ctx context.Context, key, owner string) error
	// WasSent reports whether recipient was recorded as finished for key.
	WasSent(ctx context.Context, key, recipient string) (bool, error)
	// MarkSent records recipient as finished for key if owner still holds the lease, else
	// ErrLeaseLost. The set lives for the store's SentTTL from the last MarkSent.
	MarkSent(ctx context.Context, key, owner, recipient string) error
}

// StoreOptions configures what every store shares. The zero value is valid.
type StoreOptions struct {
	// Prefix starts every record name; default DefaultPrefix ("millrace:"). It must not contain
	// '{' or '}' (the message key is wrapped in braces, a Redis Cluster hash tag).
	Prefix string
	// SentTTL is how long a fan-out progress set lives after its last MarkSent; default
	// DefaultSentTTL (7 days). Keep it at least as long as the done TTL.
	SentTTL time.Duration
	// Eviction is what RedisStore.CheckEviction does on a node that may evict the store's
	// records early (a maxmemory-policy other than noeviction): EvictionWarn (the default),
	// EvictionRefuse or EvictionIgnore.
	Eviction EvictionMode
	// Logger receives CheckEviction's warnings. Default slog.Default().
	Logger *slog.Logger
}

func (o StoreOptions) withDefaults() StoreOptions {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.SentTTL == 0 {
		o.SentTTL = DefaultSentTTL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o StoreOptions) validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("%w: Prefix %q must not contain '{' or '}'", ErrInvalidArgument, o.Prefix)
	}
	if o.Eviction > EvictionIgnore {
		return fmt.Errorf("%w: Eviction %d is not one of EvictionWarn, EvictionRefuse, EvictionIgnore", ErrInvalidArgument, o.Eviction)
	}
	if o.SentTTL < 0 {
		return fmt.Errorf("%w: SentTTL %s must not be negative", ErrInvalidArgument, o.SentTTL)
	}
	return nil
}

// processedKey names the lease record of key.
func (o StoreOptions) processedKey(key string) string {
	return o.Prefix + "processed:{" + tagged(key) + "}"
}

// sentKey names the fan-out progress set of key.
func (o StoreOptions) sentKey(key string) string {
	return o.Prefix + "sent:{" + tagged(key) + "}"
}

// tagged returns the text written between the braces of key's record names. Redis Cluster
// hashes the text between the first '{' and the first '}' after it, unless that text is
// empty: a key starting with '}' would give an empty tag, so each record name would hash whole
// and the lease and its fan-out set would land in different slots (MarkSent then fails with
// CROSSSLOT). Such a key, and for the mapping to stay one-to-one every key starting with '~',
// gets a '~' in front; every other key is written as it is, so record names do not change for
// them. The tag is then never empty and the same for both record names. Upgrading: leases and
// done markers of keys starting with '}' or '~' written by an earlier version are not found
// under their new names, so such a key can run once more within DoneTTL after the upgrade.
func tagged(key string) string {
	if key != "" && (key[0] == '}' || key[0] == '~') {
		return "~" + key
	}
	return key
}

// RecipientHash returns the SHA-256 hex digest under which a recipient is stored, so that device
// tokens and addresses never sit in the store in clear.
func RecipientHash(recipient string) string {
	sum := sha256.Sum256([]byte(recipient))
	return hex.EncodeToString(sum[:])
}

func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	return nil
}

func checkOwner(key, owner string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if owner == "" || owner == DoneValue {
		return fmt.Errorf("%w: owner %q (must be non-empty and not %q)", ErrInvalidArgument, owner, DoneValue)
	}
	return nil
}

func checkTTL(name string, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: %s %s must be positive", ErrInvalidArgument, name, ttl)
	}
	return nil
}

func checkClaim(key, owner string, ttl time.Duration) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	return checkTTL("lease TTL", ttl)
}
