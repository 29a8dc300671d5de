package redisstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// Importing the package registers redis:// and rediss:// with brokerurl's default Mux.
func init() { brokerurl.Register(urlDriver{}) }

// urlDriver opens redis:// and rediss:// URLs:
//
//	redis://[user:password@]host:port/db?group=G[&consumer=C&window=64&processing_budget=30s
//	        &min_idle=30s&reclaim_interval=1s&max_len=0&dlq_suffix=.dlq][&go-redis options such as dial_timeout]
//
// The parameters besides go-redis's own (redis.ParseURL) set the Config field of the same
// meaning; group is required unless the broker is opened with Options.NoConsume. The values of
// go-redis's options are checked as go-redis reads them, and refused in millrace's words. The
// database is named once, in the path or as go-redis's db, not both; a fragment is refused.
type urlDriver struct{}

var (
	_ brokerurl.Driver            = urlDriver{}
	_ brokerurl.ClientLogSilencer = urlDriver{}
)

// goRedisParams are go-redis's own URL options (redis.ParseURL, v9.23), passed on to it after
// goRedisValue checks their values. TestURLGoRedisParams checks go-redis still takes each, and
// TestURLGoRedisValues that it accepts the values goRedisValue accepts.
var goRedisParams = []string{
	"db", "protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "max_concurrent_dials",
	"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size",
	"conn_max_idle_time", "idle_timeout", "conn_max_lifetime", "max_conn_age",
	"conn_max_lifetime_jitter", "skip_verify",
}

// goRedisValue checks the value v of go-redis's option name as go-redis reads it (redis.ParseURL:
// an empty value is no value), so that a bad one is refused in millrace's words, naming the
// parameter and the rule (a *brokerurl.ParameterError). db and protocol are held to what the
// server takes: a database number, RESP2 or RESP3.
func goRedisValue(scheme, name, v string) error {
	if v == "" {
		return nil
	}
	var rule string
	switch name {
	case "client_name":
		return nil
	case "db":
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return nil
		}
		rule = "must be a database number, a non-negative integer"
	case "protocol":
		if v == "2" || v == "3" {
			return nil
		}
		rule = "must be 2 or 3 (RESP2 or RESP3)"
	case "pool_fifo", "skip_verify":
		if v == "true" || v == "false" || v == "1" || v == "0" {
			return nil
		}
		rule = "must be true, false, 1 or 0"
	case "max_retries", "pool_size", "min_idle_conns", "max_idle_conns", "max_active_conns", "max_concurrent_dials",
		"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size":
		if _, err := strconv.Atoi(v); err == nil {
			return nil
		}
		rule = "must be an integer (go-redis's own option)"
	default: // the durations
		if _, err := strconv.Atoi(v); err == nil {
			return nil
		}
		if _, err := time.ParseDuration(v); err == nil {
			return nil
		}
		rule = "must be a duration such as 5s or 500ms, or a number of seconds (go-redis's own option: 0 or less turns it off)"
	}
	return &brokerurl.ParameterError{Scheme: scheme, Name: name, Value: v, Rule: rule}
}

// pathDB returns the database number u's path names ("" when it names none: no path, or "/"),
// refusing any other path.
func pathDB(u *url.URL, scheme string) (string, error) {
	f := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	switch len(f) {
	case 0:
		return "", nil
	case 1:
		if n, err := strconv.Atoi(f[0]); err == nil && n >= 0 {
			return f[0], nil
		}
	}
	return "", fmt.Errorf("%w: %s:// path %q must be one database number, a non-negative integer such as /0", brokerurl.ErrInvalidURL, scheme, u.EscapedPath())
}

// Schemes returns the schemes the driver opens.
func (urlDriver) Schemes() []string { return []string{"redis", "rediss"} }

// SilenceClientLogs discards go-redis's process-wide log output (dial failures are printed
// there before the error reaches the caller).
func (urlDriver) SilenceClientLogs() { redis.SetLogger(discardRedisLogger{}) }

type discardRedisLogger struct{}

// Printf discards the message.
func (discardRedisLogger) Printf(context.Context, string, ...any) {}

// configFromURL builds the adapter's Config from u without connecting. The Redis connection
// settings stay in Config.URL, stripped of millrace's parameters; go-redis checks its own.
func configFromURL(u *url.URL, opts brokerurl.Options) (Config, error) {
	scheme := strings.ToLower(u.Scheme)
	p := brokerurl.NewParams(u)
	cfg := Config{
		Group:            p.String("group", ""),
		Consumer:         p.String("consumer", ""),
		Window:           p.Int("window", 0),
		ProcessingBudget: p.Duration("processing_budget", 0),
		MinIdle:          p.Duration("min_idle", 0),
		ReclaimInterval:  p.Duration("reclaim_interval", 0),
		MaxLen:           int64(p.Int("max_len", 0)),
		Logger:           opts.LoggerOrDiscard(),
	}
	if suffix := p.String("dlq_suffix", ""); suffix != "" {
		cfg.DeadLetterStream = func(stream string) string { return stream + suffix }
	} else if p.Has("dlq_suffix") {
		return Config{}, &brokerurl.ParameterError{Scheme: scheme, Name: "dlq_suffix", Rule: "must not be empty (the default is .dlq)"}
	}
	rest := p.Pass("go-redis", goRedisParams...)
	if err := p.Done(); err != nil {
		return Config{}, err
	}
	if u.Fragment != "" {
		return Config{}, fmt.Errorf("%w: %s:// takes no fragment (%q)", brokerurl.ErrInvalidURL, scheme, "#"+u.EscapedFragment())
	}
	db, err := pathDB(u, scheme)
	if err != nil {
		return Config{}, err
	}
	for _, name := range goRedisParams {
		if err := goRedisValue(scheme, name, rest.Get(name)); err != nil {
			return Config{}, err
		}
	}
	if db != "" && rest.Get("db") != "" {
		return Config{}, &brokerurl.ParameterError{Scheme: scheme, Name: "db", Value: rest.Get("db"),
			Rule: "and the path's database /" + db + " are both given: name the database once, in the path or as db"}
	}
	if rest.Has("skip_verify") && scheme != "rediss" {
		return Config{}, &brokerurl.ParameterError{Scheme: scheme, Name: "skip_verify", Value: rest.Get("skip_verify"), Rule: "applies to rediss:// (TLS) only"}
	}
	clean := *u
	clean.RawQuery = rest.Encode()
	if _, err := redis.ParseURL(clean.String()); err != nil {
		// Anything the checks above let through that go-redis refuses: go-redis names it.
		return Config{}, fmt.Errorf("%w: %s: %s", brokerurl.ErrInvalidURL, clean.Redacted(), strings.TrimPrefix(err.Error(), "redis: "))
	}
	cfg.URL = clean.String()
	if cfg.Group == "" {
		if !opts.NoConsume {
			return Config{}, fmt.Errorf("%w: %s:// needs parameter group, the consumer group every subscription joins (e.g. ?group=billing)", brokerurl.ErrInvalidURL, scheme)
		}
		// Never consumes: the adapter requires a group name but never uses it.
		cfg.Group = "millrace-cli"
	}
	return cfg, cfg.Validate()
}

// OpenAdapter opens the adapter u names; closing it releases everything it opened.
func (urlDriver) OpenAdapter(ctx context.Context, u *url.URL, opts brokerurl.Options) (millrace.Adapter, error) {
	return openURL(ctx, u, opts)
}

// configFieldParams maps the Config fields that URL parameters set to the parameters.
var configFieldParams = map[string]string{
	"Group": "group", "Consumer": "consumer", "Window": "window", "ProcessingBudget": "processing_budget",
	"MinIdle": "min_idle", "ReclaimInterval": "reclaim_interval", "MaxLen": "max_len",
}

// fieldName matches a Config field's name in a rule, qualified (redisstream.Config.MinIdle) or not.
var fieldName = regexp.MustCompile(`\b(?:redisstream\.Config\.)?([A-Z][A-Za-z]+)\b`)

// urlConfig is configFromURL for opening: a Config.Validate refusal of a field a URL parameter
// set is the parameter's error, `redis:// parameter min_idle="5s" (redisstream.Config.MinIdle)
// must be at least processing_budget (10s) ...` (a *configParameterError), the fields its rule
// names called by their parameters too. A field that no parameter set is left as
// Config.Validate named it.
func urlConfig(u *url.URL, opts brokerurl.Options) (Config, error) {
	cfg, err := configFromURL(u, opts)
	var ce *millrace.ConfigError
	if err == nil || !errors.As(err, &ce) {
		return cfg, err
	}
	q := u.Query()
	name, ok := configFieldParams[strings.TrimPrefix(ce.Field, "redisstream.Config.")]
	if !strings.HasPrefix(ce.Field, "redisstream.Config.") || !ok || !q.Has(name) {
		return Config{}, err
	}
	rule := fieldName.ReplaceAllStringFunc(ce.Rule, func(m string) string {
		if p, ok := configFieldParams[strings.TrimPrefix(m, "redisstream.Config.")]; ok {
			return p
		}
		return m
	})
	return Config{}, &configParameterError{
		ParameterError: &brokerurl.ParameterError{Scheme: strings.ToLower(u.Scheme), Name: name, Value: strings.Join(q[name], ","),
			Rule: "(" + ce.Field + ") " + rule},
		config: ce,
	}
}

// configParameterError is a Config.Validate refusal of a field a URL parameter set. It reads as
// the parameter's *brokerurl.ParameterError (wrapping brokerurl.ErrInvalidURL) and wraps the
// *millrace.ConfigError (millrace.ErrInvalidConfig) too.
type configParameterError struct {
	*brokerurl.ParameterError
	config *millrace.ConfigError
}

// Unwrap returns the parameter's error and the configuration error.
func (e *configParameterError) Unwrap() []error { return []error{e.ParameterError, e.config} }

// openURL opens the adapter u names and checks the server answers.
func openURL(ctx context.Context, u *url.URL, opts brokerurl.Options) (*Adapter, error) {
	cfg, err := urlConfig(u, opts)
	if err != nil {
		return nil, err
	}
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := a.Client().Ping(ctx).Err(); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("connect to %s: %w", brokerurl.Redact(u.String()), err)
	}
	return a, nil
}

// Open opens the broker u names, for publishing and operating its dead letters.
func (urlDriver) Open(ctx context.Context, u *url.URL, opts brokerurl.Options) (brokerurl.Broker, error) {
	a, err := openURL(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	return &urlBroker{a: a}, nil
}

// urlBroker is Redis Streams opened by URL: replays are XADDs in the adapter's entry format,
// and dead letters are read from its dead-letter streams.
type urlBroker struct{ a *Adapter }

var (
	_ brokerurl.Broker           = (*urlBroker)(nil)
	_ deadletter.NativePublisher = (*urlBroker)(nil)
)

// Adapter returns the adapter on this connection.
func (b *urlBroker) Adapter() millrace.Adapter { return b.a }

// PublishNative re-publishes a dead letter's Native content (a Redis entry that was not a
// Watermill message): one XADD of exactly those fields, in their order, repeated names included.
// Typed fields (another broker's headers) are refused with deadletter.ErrNotReplayable.
func (b *urlBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	return b.a.PublishNative(ctx, topic, rec.Native)
}

// TopicExists reports whether topic is an existing stream: XADD would create a missing one,
// with no consumer group to read the replay.
func (b *urlBroker) TopicExists(ctx context.Context, topic string) (bool, error) {
	typ, err := b.a.Client().Type(ctx, topic).Result()
	if err != nil {
		return false, err
	}
	return typ == "stream", nil
}

// DeadLetters returns the dead-letter stream dlq as a store. A missing key, or one that is not a
// stream, is ErrDestinationNotFound: Redis creates a dead-letter stream with its first dead
// letter, so a missing one also means none was ever written there.
func (b *urlBroker) DeadLetters(ctx context.Context, dlq string) (deadletter.Store, error) {
	typ, err := b.a.Client().Type(ctx, dlq).Result()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "stream":
		return NewDeadLetterStore(b.a.Client(), dlq)
	case "none":
		return nil, &deadletter.DestinationNotFoundError{Kind: "stream", Name: dlq, Hint: "Redis creates it with its first dead letter: none was written there"}
	}
	return nil, &deadletter.DestinationNotFoundError{Kind: "stream", Name: dlq, Hint: "the key is a " + typ + ", not a stream"}
}

// DeadLetterDestinations lists the streams named like the adapter's dead-letter streams
// (<stream><dlq_suffix>, by default <stream>.dlq) with their lengths, scanning every master of a
// cluster. Keys so named that are not streams are left out.
func (b *urlBroker) DeadLetterDestinations(ctx context.Context) ([]brokerurl.Destination, error) {
	suffix := b.a.DeadLetterTopic("") // the URL driver names dead-letter streams stream + suffix
	var (
		names []string
		scan  = func(ctx context.Context, c *redis.Client) error {
			it := c.ScanType(ctx, 0, "*"+escapeGlob(suffix), 1000, "stream").Iterator()
			for it.Next(ctx) {
				names = append(names, it.Val())
			}
			return it.Err()
		}
		err error
	)
	switch c := b.a.Client().(type) {
	case *redis.Client:
		err = scan(ctx, c)
	case *redis.ClusterClient:
		var mu sync.Mutex // ForEachMaster runs the callbacks concurrently
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, m)
		})
	default:
		return nil, errors.New("listing dead-letter streams needs a single-node or cluster client")
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]brokerurl.Destination, 0, len(names))
	for _, n := range names {
		depth, err := b.a.Client().XLen(ctx, n).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, brokerurl.Destination{Name: n, Topic: strings.TrimSuffix(n, suffix), Depth: depth})
	}
	return out, nil
}

// escapeGlob escapes the characters of s that a Redis MATCH pattern gives a meaning.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^-`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// PrepareReplay needs nothing on Redis: a replay is appended to the stream as it is.
func (b *urlBroker) PrepareReplay(deadletter.Record, *message.Message) {}

// Close closes the connection and the adapter.
func (b *urlBroker) Close() error { return b.a.Close() }
