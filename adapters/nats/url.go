package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// Importing the package registers nats:// with brokerurl's default Mux.
func init() { brokerurl.Register(urlDriver{}) }

// urlDriver opens nats:// URLs:
//
//	nats://[user:password@]host:port?durable=D[&ack_wait=30s&processing_budget=20s
//	       &max_deliver=-1&max_ack_pending=-1&window=64&nack_delay=1s]
//
// Each parameter sets the Config field of the same meaning (durable is Config.Durable,
// required unless the broker is opened with Options.NoConsume); any other parameter is an
// error that names it. The URL takes no path (or "/") and no fragment.
type urlDriver struct{}

var _ brokerurl.Driver = urlDriver{}

// Schemes returns the schemes the driver opens.
func (urlDriver) Schemes() []string { return []string{"nats"} }

// configFromURL builds the adapter's Config from u without connecting.
func configFromURL(u *url.URL, opts brokerurl.Options) (Config, error) {
	p := brokerurl.NewParams(u)
	cfg := Config{
		Durable:          p.String("durable", ""),
		AckWait:          p.Duration("ack_wait", 0),
		ProcessingBudget: p.Duration("processing_budget", 0),
		MaxDeliver:       p.Int("max_deliver", 0),
		MaxAckPending:    p.Int("max_ack_pending", 0),
		Window:           p.Int("window", 0),
		NackDelay:        p.Duration("nack_delay", 0),
		Logger:           opts.LoggerOrDiscard(),
	}
	if err := p.Done(); err != nil {
		return Config{}, err
	}
	if u.Fragment != "" {
		return Config{}, fmt.Errorf("%w: nats:// takes no fragment (%q)", brokerurl.ErrInvalidURL, "#"+u.EscapedFragment())
	}
	if u.Path != "" && u.Path != "/" {
		return Config{}, fmt.Errorf("%w: nats:// takes no path (%q)", brokerurl.ErrInvalidURL, u.EscapedPath())
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("%w: nats:// needs a host, e.g. nats://127.0.0.1:4222", brokerurl.ErrInvalidURL)
	}
	clean := *u
	clean.RawQuery, clean.Path = "", ""
	cfg.URL = clean.String()
	if cfg.Durable == "" {
		if !opts.NoConsume {
			return Config{}, fmt.Errorf("%w: nats:// needs parameter durable, the durable consumer every subscription joins (e.g. ?durable=billing)", brokerurl.ErrInvalidURL)
		}
		cfg.Durable = "millrace-cli" // never consumes: the adapter requires a name but never uses it
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, paramError(u, err)
	}
	return cfg, nil
}

// configFieldParams maps the Config fields that URL parameters set to the parameters.
var configFieldParams = map[string]string{
	"Durable": "durable", "AckWait": "ack_wait", "ProcessingBudget": "processing_budget",
	"MaxDeliver": "max_deliver", "MaxAckPending": "max_ack_pending", "Window": "window", "NackDelay": "nack_delay",
}

// paramError turns a Config.Validate refusal of a field a URL parameter set into that
// parameter's *brokerurl.ParameterError, the Config field named in its rule; other errors stay.
func paramError(u *url.URL, err error) error {
	var ce *millrace.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	name, ok := configFieldParams[strings.TrimPrefix(ce.Field, "nats.Config.")]
	if !ok || !u.Query().Has(name) {
		return err
	}
	return &brokerurl.ParameterError{Scheme: "nats", Name: name, Value: strings.Join(u.Query()[name], ","), Rule: "(" + ce.Field + ") " + ce.Rule}
}

// openURL opens the adapter u names and checks that JetStream answers.
func openURL(ctx context.Context, u *url.URL, opts brokerurl.Options) (*Adapter, error) {
	cfg, err := configFromURL(u, opts)
	if err != nil {
		return nil, err
	}
	a, err := New(cfg)
	if err == nil {
		_, err = a.js.AccountInfo(ctx)
		if err != nil {
			_ = a.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", brokerurl.Redact(u.String()), err)
	}
	return a, nil
}

// OpenAdapter opens the adapter u names; closing it releases everything it opened.
func (urlDriver) OpenAdapter(ctx context.Context, u *url.URL, opts brokerurl.Options) (millrace.Adapter, error) {
	return openURL(ctx, u, opts)
}

// Open opens the broker u names, for publishing and operating its dead letters.
func (urlDriver) Open(ctx context.Context, u *url.URL, opts brokerurl.Options) (brokerurl.Broker, error) {
	a, err := openURL(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	return &urlBroker{a: a}, nil
}

// urlBroker is JetStream opened by URL: dead letters are read from the "<subject>.dlq"
// streams, replays of native content publish its headers exactly.
type urlBroker struct{ a *Adapter }

var (
	_ brokerurl.Broker           = (*urlBroker)(nil)
	_ deadletter.NativePublisher = (*urlBroker)(nil)
)

// Adapter returns the adapter on this connection.
func (b *urlBroker) Adapter() millrace.Adapter { return b.a }

// TopicExists reports whether a stream of the adapter's naming holds topic: a publish to a
// subject no stream holds is not stored.
func (b *urlBroker) TopicExists(ctx context.Context, topic string) (bool, error) {
	if b.a.checkTopic(topic) != nil {
		return false, nil
	}
	s, err := b.a.js.Stream(ctx, b.a.cfg.StreamName(topic))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.Contains(s.CachedInfo().Config.Subjects, topic), nil
}

// DeadLetters returns the dead-letter subject dlq (e.g. "orders.dlq") as a store; a subject
// with no stream of the adapter's naming is ErrDestinationNotFound.
func (b *urlBroker) DeadLetters(ctx context.Context, dlq string) (deadletter.Store, error) {
	if b.a.checkTopic(dlq) != nil {
		return nil, &deadletter.DestinationNotFoundError{Kind: "stream", Name: dlq, Hint: "not a literal NATS subject"}
	}
	s, err := NewDeadLetterStore(b.a.js, dlq, b.a.cfg.StreamName(dlq))
	if err != nil {
		return nil, err
	}
	if _, err := s.streamHandle(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// DeadLetterDestinations lists the streams that hold exactly one subject ending in ".dlq"
// under the adapter's stream naming, with their message counts.
func (b *urlBroker) DeadLetterDestinations(ctx context.Context) ([]brokerurl.Destination, error) {
	var out []brokerurl.Destination
	l := b.a.js.ListStreams(ctx)
	for info := range l.Info() {
		subs := info.Config.Subjects
		if len(subs) != 1 || !strings.HasSuffix(subs[0], DeadLetterSuffix) || info.Config.Name != b.a.cfg.StreamName(subs[0]) {
			continue
		}
		out = append(out, brokerurl.Destination{Name: subs[0], Topic: strings.TrimSuffix(subs[0], DeadLetterSuffix), Depth: int64(info.State.Msgs)})
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(x, y brokerurl.Destination) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// PublishNative re-publishes a dead letter's Native content (headers a Watermill message could
// not hold, such as a repeated one) exactly: those headers, repeated names included, and
// rec.Payload as the data, with a JetStream ack. A typed field is refused with
// deadletter.ErrNotReplayable.
func (b *urlBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	if err := b.a.ensureStream(ctx, topic); err != nil {
		return err
	}
	m := nats.NewMsg(topic)
	m.Data = rec.Payload
	for _, f := range rec.Native {
		if f.Type != "" || !validHeaderName(f.Name) || checkHeader(f.Name, string(f.Value)) != nil {
			return fmt.Errorf("%w: native field %q (type %q) is no NATS header", deadletter.ErrNotReplayable, f.Name, f.Type)
		}
		m.Header.Add(f.Name, string(f.Value))
	}
	if _, err := b.a.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("nats: publish to %q: %w", topic, err)
	}
	return nil
}

// PrepareReplay needs nothing on NATS: a replay is published to the subject as it is.
func (b *urlBroker) PrepareReplay(deadletter.Record, *message.Message) {}

// Close closes the connection and the adapter.
func (b *urlBroker) Close() error { return b.a.Close() }
