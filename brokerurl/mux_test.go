package brokerurl

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// fakeDriver opens fakeBrokers; it counts what is done with it.
type fakeDriver struct {
	schemes  []string
	purger   bool  // the broker's stores are Purgers
	openErr  error // Open fails with it
	dlqErr   error // DeadLetters fails with it
	opened   []*fakeBroker
	lastOpts Options
}

func (d *fakeDriver) Schemes() []string { return d.schemes }

func (d *fakeDriver) Open(_ context.Context, u *url.URL, opts Options) (Broker, error) {
	d.lastOpts = opts
	if d.openErr != nil {
		return nil, d.openErr
	}
	b := &fakeBroker{d: d, u: u}
	d.opened = append(d.opened, b)
	return b, nil
}

func (d *fakeDriver) OpenAdapter(_ context.Context, u *url.URL, opts Options) (millrace.Adapter, error) {
	d.lastOpts = opts
	return fakeAdapter{}, nil
}

// silencingDriver is a fakeDriver with client logs to silence.
type silencingDriver struct {
	fakeDriver
	silenced atomic.Int32
}

func (d *silencingDriver) SilenceClientLogs() { d.silenced.Add(1) }

// fakeAdapter names dead-letter destinations; nothing else of it is used.
type fakeAdapter struct{ millrace.Adapter }

func (fakeAdapter) DeadLetterTopic(topic string) string { return topic + ".dead" }

type fakeBroker struct {
	d      *fakeDriver
	u      *url.URL
	dlq    string // what DeadLetters was asked for
	closed int
	store  *fakeStore
}

func (b *fakeBroker) Adapter() millrace.Adapter                                     { return fakeAdapter{} }
func (b *fakeBroker) TopicExists(context.Context, string) (bool, error)             { return true, nil }
func (b *fakeBroker) PrepareReplay(deadletter.Record, *message.Message)             {}
func (b *fakeBroker) DeadLetterDestinations(context.Context) ([]Destination, error) { return nil, nil }
func (b *fakeBroker) Close() error                                                  { b.closed++; return nil }

func (b *fakeBroker) DeadLetters(_ context.Context, dlq string) (deadletter.Store, error) {
	b.dlq = dlq
	if b.d.dlqErr != nil {
		return nil, b.d.dlqErr
	}
	b.store = &fakeStore{}
	if b.d.purger {
		return &fakePurgerStore{b.store}, nil
	}
	return b.store, nil
}

// fakeStore counts Close; nothing else of it is used.
type fakeStore struct {
	deadletter.Store
	closed int
	purged int
}

func (s *fakeStore) Close() error { s.closed++; return nil }

type fakePurgerStore struct{ *fakeStore }

func (s *fakePurgerStore) Purge(context.Context, deadletter.Filter) (int64, error) {
	s.purged++
	return 3, nil
}

// fakeOpener opens the same store for every URL.
type fakeOpener struct {
	schemes []string
	opts    StoreOptions
}

func (o *fakeOpener) Schemes() []string { return o.schemes }
func (o *fakeOpener) OpenStore(_ context.Context, _ *url.URL, opts StoreOptions) (deadletter.Store, error) {
	o.opts = opts
	return &fakeStore{}, nil
}

// mustPanic runs f and returns its panic message, failing when it does not panic.
func mustPanic(t *testing.T, what string, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Errorf("%s: no panic", what)
		}
		msg, _ = r.(string)
	}()
	f()
	return ""
}

// A scheme registered twice, by drivers or store openers in any mix and in any case, panics,
// and the panicking registration adds none of its schemes.
func TestMuxRegisterDuplicate(t *testing.T) {
	m := NewMux()
	m.Register(&fakeDriver{schemes: []string{"fake", "fakes"}})
	m.RegisterStore(&fakeOpener{schemes: []string{"table"}})
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"driver after driver", func() { m.Register(&fakeDriver{schemes: []string{"new", "FAKE"}}) }},
		{"driver after store", func() { m.Register(&fakeDriver{schemes: []string{"new", "table"}}) }},
		{"store after driver", func() { m.RegisterStore(&fakeOpener{schemes: []string{"new", "fakes"}}) }},
		{"store after store", func() { m.RegisterStore(&fakeOpener{schemes: []string{"new", "Table"}}) }},
		{"one scheme twice", func() { m.Register(&fakeDriver{schemes: []string{"new", "new"}}) }},
		{"no scheme", func() { m.Register(&fakeDriver{}) }},
		{"empty scheme", func() { m.RegisterStore(&fakeOpener{schemes: []string{""}}) }},
		{"nil driver", func() { m.Register(nil) }},
		{"nil opener", func() { m.RegisterStore(nil) }},
	} {
		msg := mustPanic(t, tc.name, tc.f)
		if !strings.HasPrefix(msg, "brokerurl: ") {
			t.Errorf("%s: panic %q, want a brokerurl message", tc.name, msg)
		}
	}
	if got := strings.Join(m.Schemes(true), " "); got != "fake fakes table" {
		t.Errorf("Schemes after the panics = %q, want the first registrations only", got)
	}
	if got := strings.Join(m.Schemes(false), " "); got != "fake fakes" {
		t.Errorf("Schemes(false) = %q", got)
	}
}

// An unknown scheme names the schemes the Mux knows (store schemes too where a store opens), or
// says none is registered; a URL without scheme or that does not parse is ErrInvalidURL and
// never shows the password.
func TestMuxUnknownScheme(t *testing.T) {
	ctx := context.Background()
	m := NewMux()
	if _, err := m.OpenBroker(ctx, "redis://h", Options{}); !errors.Is(err, ErrUnknownScheme) || !strings.Contains(err.Error(), "none: import an adapter package") {
		t.Errorf("empty Mux: err = %v", err)
	}
	m.Register(&fakeDriver{schemes: []string{"b", "a"}})
	m.RegisterStore(&fakeOpener{schemes: []string{"table"}})
	for _, tc := range []struct {
		open func() error
		want string
	}{
		{func() error { _, err := m.OpenBroker(ctx, "Zzz://h", Options{}); return err }, `brokerurl: unknown URL scheme "zzz" (known: a, b)`},
		{func() error { _, err := m.OpenAdapter(ctx, "zzz://h", Options{}); return err }, `brokerurl: unknown URL scheme "zzz" (known: a, b)`},
		{func() error { _, err := m.OpenStore(ctx, "zzz://h", StoreOptions{}); return err }, `brokerurl: unknown URL scheme "zzz" (known: a, b, table)`},
		{func() error { _, _, err := m.Driver("zzz://h"); return err }, `brokerurl: unknown URL scheme "zzz" (known: a, b)`},
	} {
		if err := tc.open(); !errors.Is(err, ErrUnknownScheme) || err.Error() != tc.want {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
	for _, raw := range []string{"127.0.0.1:6379", "//u:secret@h", "a://u:secret@h:port/", "a://u:secret@h/%zz"} {
		_, err := m.OpenBroker(ctx, raw, Options{})
		if !errors.Is(err, ErrInvalidURL) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: err = %v, want ErrInvalidURL without the password", raw, err)
		}
	}
	// Schemes are case-insensitive.
	if _, err := m.OpenBroker(ctx, "A://h", Options{}); err != nil {
		t.Errorf("A://: %v", err)
	}
}

// OpenStore on a broker needs a topic or a dead-letter topic, always opens the broker with
// NoConsume, reads the adapter's destination of the topic (or the one named), and closing the
// store closes the broker. On error, the broker it opened is closed.
func TestMuxOpenStoreBroker(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{schemes: []string{"fake"}}
	m := NewMux()
	m.Register(d)
	if _, err := m.OpenStore(ctx, "fake://h", StoreOptions{}); !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), "StoreOptions.Topic") {
		t.Errorf("no topic: err = %v, want ErrInvalidURL naming StoreOptions.Topic", err)
	}
	if len(d.opened) != 0 {
		t.Error("no topic: the broker was opened")
	}
	s, err := m.OpenStore(ctx, "fake://h", StoreOptions{Topic: "orders", Broker: Options{NoConsume: false}})
	if err != nil {
		t.Fatal(err)
	}
	b := d.opened[0]
	if !d.lastOpts.NoConsume || b.dlq != "orders.dead" {
		t.Errorf("NoConsume %v, destination %q: want true, the adapter's orders.dead", d.lastOpts.NoConsume, b.dlq)
	}
	if b.closed != 0 {
		t.Fatal("broker closed before the store")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if b.closed != 1 || b.store.closed != 1 {
		t.Errorf("after Close: broker closed %d times, store %d; want 1, 1", b.closed, b.store.closed)
	}
	if _, err := m.OpenStore(ctx, "fake://h", StoreOptions{Topic: "orders", DeadLetterTopic: "custom"}); err != nil || d.opened[1].dlq != "custom" {
		t.Errorf("DeadLetterTopic: destination %q, err %v; want custom", d.opened[1].dlq, err)
	}
	d.dlqErr = deadletter.ErrDestinationNotFound
	if _, err := m.OpenStore(ctx, "fake://h", StoreOptions{DeadLetterTopic: "x"}); !errors.Is(err, deadletter.ErrDestinationNotFound) || d.opened[2].closed != 1 {
		t.Errorf("missing destination: err %v, broker closed %d times; want the error and the broker closed", err, d.opened[2].closed)
	}
	d.openErr = errors.New("unreachable")
	if _, err := m.OpenStore(ctx, "fake://h", StoreOptions{Topic: "t"}); err != d.openErr {
		t.Errorf("open error: err = %v", err)
	}
}

// A store opener gets the URL whatever the options; it needs no topic.
func TestMuxOpenStoreOpener(t *testing.T) {
	o := &fakeOpener{schemes: []string{"table"}}
	m := NewMux()
	m.RegisterStore(o)
	if _, err := m.OpenStore(context.Background(), "table://h", StoreOptions{Table: "t"}); err != nil || o.opts.Table != "t" {
		t.Errorf("err %v, options %+v", err, o.opts)
	}
	if _, err := m.OpenBroker(context.Background(), "table://h", Options{}); !errors.Is(err, ErrUnknownScheme) {
		t.Errorf("OpenBroker(store scheme): err = %v, want ErrUnknownScheme", err)
	}
}

// A Purger store stays a Purger through OpenStore (the CLI purges in one operation), and a store
// that is not one does not become one.
func TestMuxOpenStorePurger(t *testing.T) {
	ctx := context.Background()
	for _, purger := range []bool{true, false} {
		d := &fakeDriver{schemes: []string{"fake"}, purger: purger}
		m := NewMux()
		m.Register(d)
		s, err := m.OpenStore(ctx, "fake://h", StoreOptions{Topic: "t"})
		if err != nil {
			t.Fatal(err)
		}
		p, ok := s.(deadletter.Purger)
		if ok != purger {
			t.Fatalf("purger %v: store is a Purger: %v", purger, ok)
		}
		if ok {
			if n, err := p.Purge(ctx, deadletter.Filter{Topic: "t"}); n != 3 || err != nil || d.opened[0].store.purged != 1 {
				t.Errorf("Purge = %d, %v (store purged %d times); want the store's", n, err, d.opened[0].store.purged)
			}
		}
		if err := s.Close(); err != nil || d.opened[0].closed != 1 || d.opened[0].store.closed != 1 {
			t.Errorf("purger %v: Close: %v, broker closed %d, store closed %d", purger, err, d.opened[0].closed, d.opened[0].store.closed)
		}
	}
}

// A clone has the original's schemes; registering on either leaves the other unchanged.
func TestMuxClone(t *testing.T) {
	m := NewMux()
	m.Register(&fakeDriver{schemes: []string{"a"}})
	m.RegisterStore(&fakeOpener{schemes: []string{"s"}})
	c := m.Clone()
	c.Register(&fakeDriver{schemes: []string{"b"}})
	m.RegisterStore(&fakeOpener{schemes: []string{"t"}})
	if got := strings.Join(m.Schemes(true), " "); got != "a s t" {
		t.Errorf("original: %q", got)
	}
	if got := strings.Join(c.Schemes(true), " "); got != "a b s" {
		t.Errorf("clone: %q", got)
	}
	if _, err := c.OpenAdapter(context.Background(), "a://h", Options{}); err != nil {
		t.Errorf("clone opens the original's scheme: %v", err)
	}
	var zero Mux
	if got := zero.Clone().Schemes(true); len(got) != 0 {
		t.Errorf("clone of the zero Mux: %v", got)
	}
	zero.Register(&fakeDriver{schemes: []string{"z"}}) // the zero Mux is ready to use
}

// SilenceClientLogs reaches every driver that has client logs, and no other.
func TestMuxSilenceClientLogs(t *testing.T) {
	loud := &silencingDriver{fakeDriver: fakeDriver{schemes: []string{"loud"}}}
	m := NewMux()
	m.Register(loud)
	m.Register(&fakeDriver{schemes: []string{"quiet"}})
	m.Clone().SilenceClientLogs()
	if loud.silenced.Load() != 1 {
		t.Errorf("silenced %d times through a clone, want 1", loud.silenced.Load())
	}
	m.SilenceClientLogs()
	if loud.silenced.Load() != 2 {
		t.Errorf("silenced %d times, want 2", loud.silenced.Load())
	}
}

// Options reach the driver; LoggerOrDiscard gives a logger that drops everything.
func TestMuxOptions(t *testing.T) {
	d := &fakeDriver{schemes: []string{"fake"}}
	m := NewMux()
	m.Register(d)
	if _, err := m.OpenAdapter(context.Background(), "fake://h", Options{NoConsume: true}); err != nil || !d.lastOpts.NoConsume {
		t.Errorf("OpenAdapter: err %v, options %+v", err, d.lastOpts)
	}
	if l := (Options{}).LoggerOrDiscard(); l == nil || l.Enabled(context.Background(), 12) {
		t.Error("LoggerOrDiscard: want a logger with every level disabled")
	}
}

// Redact hides the password of a URL, parsable or not, and leaves the rest.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/vh":      "amqp://guest:xxxxx@127.0.0.1:5672/vh",
		"redis://:s3cret@h:6379/0?group=g":          "redis://:xxxxx@h:6379/0?group=g",
		"kafka://h:9092?group=g":                    "kafka://h:9092?group=g",
		"redis://user@h":                            "redis://user@h",
		"amqp://u:p%zz@h:port/x":                    "amqp://u:xxxxx@h:port/x",
		"amqp://u:pa@ss@h:bad/x@y":                  "amqp://u:xxxxx@y", // which "@" ends the password cannot be told: hide more
		"not a url with %zz":                        "not a url with %zz",
		"postgres://u:pw@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		// Reserved characters left unencoded in a password: the review found these shown.
		"redis://u:ab/cdSECRET@127.0.0.1:6379":       "redis://u:xxxxx@127.0.0.1:6379",
		"redis://u:ab#SECRET@127.0.0.1:6379/0":       "redis://u:xxxxx@127.0.0.1:6379/0",
		"redis://u:ab?SECRET@127.0.0.1:6379":         "redis://u:xxxxx@127.0.0.1:6379",
		"kafka://u:a/b@c@h1:9092,h2:9092?sasl=plain": "kafka://u:xxxxx@h1:9092,h2:9092?sasl=plain",
		"redis://u:%zzSECRET/x@h:6379":               "redis://u:xxxxx@h:6379",
		"redis://u:SE/CR#ET@":                        "redis://(rest not shown: it does not parse)",
		// Secrets in parameters.
		"amqp://guest:guest@h:5672/?management=http://guest:guest@h:15672": "amqp://guest:xxxxx@h:5672/?management=http://guest:xxxxx@h:15672",
		"postgres://u@h/db?password=SECRET&sslmode=disable":                "postgres://u@h/db?password=xxxxx&sslmode=disable",
		"kafka://h:9092?tls_key=/etc/k.pem&tls_ca=/etc/ca.pem":             "kafka://h:9092?tls_key=/etc/k.pem&tls_ca=/etc/ca.pem",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(Redact(in), "SECRET") {
			t.Errorf("Redact(%q) shows the secret", in)
		}
	}
}

// An unparsable URL's error never quotes its password (url.Parse's errors quote the piece that
// failed, e.g. `invalid port ":ab"` for the password "ab#SECRET").
func TestParseErrorHidesPassword(t *testing.T) {
	for _, raw := range []string{"redis://u:ab/cdSECRET@127.0.0.1:6379", "redis://u:ab#SECRET@127.0.0.1:6379", "kafka://u:SE%zzCRET@h:9092"} {
		_, err := NewMux().OpenBroker(context.Background(), raw, Options{})
		if !errors.Is(err, ErrInvalidURL) {
			t.Fatalf("OpenBroker(%q) = %v, want ErrInvalidURL", raw, err)
		}
		if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), ":ab") {
			t.Errorf("OpenBroker(%q) error shows the password: %v", raw, err)
		}
	}
}
