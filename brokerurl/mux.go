package brokerurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

var (
	// ErrUnknownScheme is wrapped when no registered driver opens a URL's scheme.
	ErrUnknownScheme = errors.New("brokerurl: unknown URL scheme")
	// ErrUnknownParameter is wrapped when a URL carries a query parameter its driver does not know.
	ErrUnknownParameter = errors.New("brokerurl: unknown URL parameter")
	// ErrInvalidURL is wrapped when a URL cannot be parsed or a parameter has a bad value.
	ErrInvalidURL = errors.New("brokerurl: invalid URL")
)

// StoreOpener opens a dead-letter store that is not a broker's destination (the table store).
type StoreOpener interface {
	// Schemes lists the lower-case URL schemes the opener opens, e.g. "postgres".
	Schemes() []string
	// OpenStore opens the store u names with the options that apply to it.
	OpenStore(ctx context.Context, u *url.URL, opts StoreOptions) (deadletter.Store, error)
}

// StoreOptions say which store a URL opens.
type StoreOptions struct {
	// Topic selects, on a broker, the adapter's dead-letter destination of this work topic.
	Topic string
	// DeadLetterTopic names, on a broker, the destination exactly, when it is not the
	// adapter's default for Topic. One of Topic and DeadLetterTopic is required for a broker.
	DeadLetterTopic string
	// Table and Schema name the table store's table (defaults: the table store's own).
	Table, Schema string
	// Broker are the options of the broker connection a broker store opens. NoConsume is
	// always set: a store never consumes.
	Broker Options
}

// Mux maps URL schemes to drivers. The zero Mux is empty and ready to use.
type Mux struct {
	mu      sync.RWMutex
	drivers map[string]Driver
	stores  map[string]StoreOpener
}

// NewMux returns an empty Mux, for programs that register their drivers themselves.
func NewMux() *Mux { return &Mux{} }

// Clone returns a new Mux with m's drivers and store openers, for a program (or a test) that
// wants the registered schemes plus some of its own without changing m.
func (m *Mux) Clone() *Mux {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c := &Mux{drivers: make(map[string]Driver, len(m.drivers)), stores: make(map[string]StoreOpener, len(m.stores))}
	for k, d := range m.drivers {
		c.drivers[k] = d
	}
	for k, o := range m.stores {
		c.stores[k] = o
	}
	return c
}

var defaultMux Mux

// DefaultMux is the Mux the adapter packages register with when they are imported.
func DefaultMux() *Mux { return &defaultMux }

// Register adds d for each of its schemes. It panics when d is nil, names no scheme, or a
// scheme is taken (by a driver or a store opener): two drivers for one scheme is a programming
// error found at start-up, as with database/sql. On a panic nothing is registered.
func (m *Mux) Register(d Driver) {
	if d == nil {
		panic("brokerurl: Register of a nil Driver")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	schemes := m.free(d.Schemes())
	if m.drivers == nil {
		m.drivers = map[string]Driver{}
	}
	for _, s := range schemes {
		m.drivers[s] = d
	}
}

// RegisterStore adds o for each of its schemes. It panics as Register does.
func (m *Mux) RegisterStore(o StoreOpener) {
	if o == nil {
		panic("brokerurl: RegisterStore of a nil StoreOpener")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	schemes := m.free(o.Schemes())
	if m.stores == nil {
		m.stores = map[string]StoreOpener{}
	}
	for _, s := range schemes {
		m.stores[s] = o
	}
}

// free returns schemes lower-cased, panicking when there are none or one is empty or taken.
// m.mu is held.
func (m *Mux) free(schemes []string) []string {
	if len(schemes) == 0 {
		panic("brokerurl: a driver or store opener with no scheme")
	}
	out := make([]string, 0, len(schemes))
	for _, s := range schemes {
		s = strings.ToLower(s)
		_, drv := m.drivers[s]
		_, sto := m.stores[s]
		if s == "" || drv || sto || slices.Contains(out, s) {
			panic(fmt.Sprintf("brokerurl: scheme %q registered twice (or empty)", s))
		}
		out = append(out, s)
	}
	return out
}

// Schemes lists the broker schemes registered, sorted; with stores, the store schemes too.
func (m *Mux) Schemes(stores bool) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var s []string
	for k := range m.drivers {
		s = append(s, k)
	}
	if stores {
		for k := range m.stores {
			s = append(s, k)
		}
	}
	slices.Sort(s)
	return s
}

// SilenceClientLogs silences the process-wide logging of every registered broker client that
// has one (see ClientLogSilencer). For programs that own their process, such as the CLI.
func (m *Mux) SilenceClientLogs() {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, d := range m.drivers {
		if s, ok := d.(ClientLogSilencer); ok {
			s.SilenceClientLogs()
		}
	}
}

// parse parses rawURL and checks it has a scheme. Its errors never show the password.
func parse(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalidURL, Redact(rawURL), parseProblem(rawURL, err))
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: %s has no scheme (such as kafka:// or redis://)", ErrInvalidURL, Redact(rawURL))
	}
	return u, nil
}

func (m *Mux) unknown(scheme string, stores bool) error {
	known := m.Schemes(stores)
	list := "none: import an adapter package to register its schemes"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	return fmt.Errorf("%w %q (known: %s)", ErrUnknownScheme, scheme, list)
}

// OpenBroker opens the broker rawURL names with the driver registered for its scheme.
func (m *Mux) OpenBroker(ctx context.Context, rawURL string, opts Options) (Broker, error) {
	d, u, err := m.Driver(rawURL)
	if err != nil {
		return nil, err
	}
	return d.Open(ctx, u, opts)
}

// OpenAdapter opens the adapter of the broker rawURL names, and nothing else: closing the
// adapter releases everything opened.
func (m *Mux) OpenAdapter(ctx context.Context, rawURL string, opts Options) (millrace.Adapter, error) {
	d, u, err := m.Driver(rawURL)
	if err != nil {
		return nil, err
	}
	return d.OpenAdapter(ctx, u, opts)
}

// OpenStore opens the dead-letter store rawURL names: a store opener's (postgres://), or the
// dead-letter destination opts selects on a broker. Closing the store releases the broker
// connection it opened.
func (m *Mux) OpenStore(ctx context.Context, rawURL string, opts StoreOptions) (deadletter.Store, error) {
	u, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	scheme := strings.ToLower(u.Scheme)
	m.mu.RLock()
	o, d := m.stores[scheme], m.drivers[scheme]
	m.mu.RUnlock()
	if o != nil {
		return o.OpenStore(ctx, u, opts)
	}
	if d == nil {
		return nil, m.unknown(u.Scheme, true)
	}
	if opts.Topic == "" && opts.DeadLetterTopic == "" {
		return nil, fmt.Errorf("%w: a %s:// dead-letter store needs StoreOptions.Topic or StoreOptions.DeadLetterTopic: a broker keeps one destination per topic", ErrInvalidURL, scheme)
	}
	bo := opts.Broker
	bo.NoConsume = true
	b, err := d.Open(ctx, u, bo)
	if err != nil {
		return nil, err
	}
	dlq := opts.DeadLetterTopic
	if dlq == "" {
		dlq = b.Adapter().DeadLetterTopic(opts.Topic)
	}
	s, err := b.DeadLetters(ctx, dlq)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return owning(s, b), nil
}

// closingStore closes the broker connection it was read through on Close.
type closingStore struct {
	deadletter.Store
	b Broker
}

// Close closes the store, then its broker connection.
func (c *closingStore) Close() error {
	err := c.Store.Close()
	if berr := c.b.Close(); err == nil {
		err = berr
	}
	return err
}

// closingPurgerStore is a closingStore over a deadletter.Purger, which embedding the Store
// interface would hide.
type closingPurgerStore struct {
	*closingStore
	p deadletter.Purger
}

// Purge deletes every entry matching f in one operation (deadletter.Purger).
func (c closingPurgerStore) Purge(ctx context.Context, f deadletter.Filter) (int64, error) {
	return c.p.Purge(ctx, f)
}

// owning wraps s so that closing it closes b, keeping s's optional interfaces.
func owning(s deadletter.Store, b Broker) deadletter.Store {
	cs := &closingStore{Store: s, b: b}
	if p, ok := s.(deadletter.Purger); ok {
		return closingPurgerStore{closingStore: cs, p: p}
	}
	return cs
}

// Default-Mux shorthands.

// Register adds d to the default Mux; adapter packages call it from init.
func Register(d Driver) { defaultMux.Register(d) }

// RegisterStore adds o to the default Mux; store packages call it from init.
func RegisterStore(o StoreOpener) { defaultMux.RegisterStore(o) }

// OpenBroker opens rawURL's broker through the default Mux.
func OpenBroker(ctx context.Context, rawURL string, opts Options) (Broker, error) {
	return defaultMux.OpenBroker(ctx, rawURL, opts)
}

// OpenAdapter opens rawURL's adapter through the default Mux.
func OpenAdapter(ctx context.Context, rawURL string, opts Options) (millrace.Adapter, error) {
	return defaultMux.OpenAdapter(ctx, rawURL, opts)
}

// OpenStore opens rawURL's dead-letter store through the default Mux.
func OpenStore(ctx context.Context, rawURL string, opts StoreOptions) (deadletter.Store, error) {
	return defaultMux.OpenStore(ctx, rawURL, opts)
}
