package idempotency

import (
	"context"
	"sync"
	"time"
)

// MemoryStore is a Store held in process memory, for tests and single-process consumers.
// It has the expiry semantics of the Redis store. Create it with NewMemoryStore.
type MemoryStore struct {
	opts StoreOptions

	mu     sync.Mutex
	leases map[string]memLease
	sent   map[string]*memSet
	writes int
}

type memLease struct {
	value   string
	expires time.Time
}

type memSet struct {
	members map[string]struct{}
	expires time.Time
}

// sweepEvery is how many writes pass between two sweeps of expired records.
const sweepEvery = 1024

// NewMemoryStore returns an empty MemoryStore; it fails only on invalid options.
func NewMemoryStore(opts StoreOptions) (*MemoryStore, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &MemoryStore{opts: opts, leases: map[string]memLease{}, sent: map[string]*memSet{}}, nil
}

// lease returns the live lease record of name; an expired one is deleted. Callers hold mu.
func (s *MemoryStore) lease(name string, now time.Time) (memLease, bool) {
	l, ok := s.leases[name]
	if ok && !now.Before(l.expires) {
		delete(s.leases, name)
		return memLease{}, false
	}
	return l, ok
}

// set returns the live set record of name; an expired one is deleted. Callers hold mu.
func (s *MemoryStore) set(name string, now time.Time) (*memSet, bool) {
	m, ok := s.sent[name]
	if ok && !now.Before(m.expires) {
		delete(s.sent, name)
		return nil, false
	}
	return m, ok
}

// wrote counts a write and sweeps expired records now and then. Callers hold mu.
func (s *MemoryStore) wrote(now time.Time) {
	s.writes++
	if s.writes%sweepEvery != 0 {
		return
	}
	for name := range s.leases {
		s.lease(name, now)
	}
	for name := range s.sent {
		s.set(name, now)
	}
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, key, owner string, leaseTTL time.Duration) (ClaimResult, error) {
	if err := checkClaim(key, owner, leaseTTL); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	name := s.opts.processedKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if l, ok := s.lease(name, now); ok {
		if l.value == DoneValue {
			return Done, nil
		}
		return Busy, nil
	}
	s.leases[name] = memLease{value: owner, expires: now.Add(leaseTTL)}
	s.wrote(now)
	return Acquired, nil
}

// Complete implements Store.
func (s *MemoryStore) Complete(ctx context.Context, key, owner string, doneTTL time.Duration) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	if err := checkTTL("done TTL", doneTTL); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	name := s.opts.processedKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if l, ok := s.lease(name, now); !ok || l.value != owner {
		return ErrLeaseLost
	}
	s.leases[name] = memLease{value: DoneValue, expires: now.Add(doneTTL)}
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(ctx context.Context, key, owner string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	name := s.opts.processedKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.lease(name, time.Now()); !ok || l.value != owner {
		return ErrLeaseLost
	}
	delete(s.leases, name)
	return nil
}

// WasSent implements Store.
func (s *MemoryStore) WasSent(ctx context.Context, key, recipient string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	h := RecipientHash(recipient)
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.set(s.opts.sentKey(key), time.Now())
	if !ok {
		return false, nil
	}
	_, sent := m.members[h]
	return sent, nil
}

// MarkSent implements Store.
func (s *MemoryStore) MarkSent(ctx context.Context, key, owner, recipient string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	h := RecipientHash(recipient)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if l, ok := s.lease(s.opts.processedKey(key), now); !ok || l.value != owner {
		return ErrLeaseLost
	}
	name := s.opts.sentKey(key)
	m, ok := s.set(name, now)
	if !ok {
		m = &memSet{members: map[string]struct{}{}}
		s.sent[name] = m
	}
	m.members[h] = struct{}{}
	m.expires = now.Add(s.opts.SentTTL)
	s.wrote(now)
	return nil
}
