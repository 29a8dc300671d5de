package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/xdg-go/scram"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// Importing the package registers kafka:// with brokerurl's default Mux.
func init() { brokerurl.Register(urlDriver{}) }

// urlDriver opens kafka:// URLs:
//
//	kafka://[user:password@]host:port[,host:port...]?group=G[&parameter=value...]
//
// group is required unless the broker is opened with Options.NoConsume. The parameters, each
// setting the Config field (or the field of Config.Sarama) of the same meaning:
//
//	group=G                        ConsumerGroup
//	at_least_once=true             AtLeastOnce
//	transactional_id_prefix=P      TransactionalIDPrefix
//	partitions=N                   Partitions (of a source topic Provision creates)
//	replication_factor=N           ReplicationFactor (of the topics Provision creates)
//	version=3.6.0                  Sarama.Version, the Kafka protocol version spoken (at
//	                               least 2.5.0 unless at_least_once=true)
//	tls=true                       Sarama.Net.TLS.Enable (implied by every tls_ parameter)
//	tls_ca=/path/ca.pem            the CAs trusted instead of the system's (PEM file)
//	tls_cert=/path/client.pem      a client certificate (PEM file), with tls_key
//	tls_key=/path/client-key.pem   its private key (PEM file), with tls_cert
//	tls_server_name=NAME           the name the brokers' certificates must carry
//	tls_insecure_skip_verify=true  accept any certificate (tests only)
//	sasl=plain|scram-sha-256|scram-sha-512
//	                               Sarama.Net.SASL, with the user and password of the URL's
//	                               userinfo (percent-encoded), which it requires
//	dial_timeout=10s               Sarama.Net.DialTimeout (a Go duration, above zero)
//	read_timeout=15s               Sarama.Net.ReadTimeout (a Go duration, above zero): how long
//	                               a request waits for its response
//
// The password is taken from the userinfo only, never from a parameter: brokerurl.Redact and
// url.URL.Redacted hide it there in errors and logs. userinfo without sasl is refused (it would
// otherwise be ignored), and so are a path other than "/" and a fragment (a topic is named by
// the command or the code, not the URL). SASL PLAIN sends the password as it is: use it with
// tls=true. The TLS files are read when the broker is opened (configFromURL does no I/O).
//
// Without dial_timeout and read_timeout the adapter keeps Sarama's 30 s, and the broker's
// operations client (the one the CLI's commands use, see Open) dials for at most
// opsDialTimeout (10 s), waits opsReadTimeout (15 s) for a response, stops retrying a metadata
// request after opsMetadataTimeout (20 s), and gives up connecting after opsConnectTimeout
// (30 s), so an unresponsive cluster fails in 30 s, not minutes. A dial_timeout or
// read_timeout the URL sets replaces its bound, and connecting is then not bounded as a whole.
// Opening also returns as soon as its context ends.
type urlDriver struct{}

var _ brokerurl.Driver = urlDriver{}

// Schemes returns "kafka".
func (urlDriver) Schemes() []string { return []string{"kafka"} }

// tlsFiles are the files a kafka:// URL names for TLS, read when the broker is opened.
type tlsFiles struct {
	ca, cert, key string
}

// urlExtra is what a kafka:// URL gives besides the adapter's Config.
type urlExtra struct {
	files tlsFiles
	// dialTimeout and readTimeout are the URL's dial_timeout and read_timeout, 0 when absent.
	dialTimeout, readTimeout time.Duration
}

// The operations client's bounds when the URL sets no dial_timeout or read_timeout (Sarama's
// own are 30 s each, with 3 metadata retries: an address that accepts connections and never
// answers kept the CLI for minutes). opsReadTimeout stays above Sarama's 10 s
// Producer.Timeout, the time the brokers may take to acknowledge a replay (acks=all).
const (
	opsDialTimeout     = 10 * time.Second
	opsReadTimeout     = 15 * time.Second
	opsMetadataTimeout = 20 * time.Second
	// opsConnectTimeout bounds connecting the operations client as a whole (Sarama's retries
	// of an unanswered first request added up to 45 s with the bounds above).
	opsConnectTimeout = 30 * time.Second
)

// operationsConfig is the configuration of the operations client: the store's (with the
// adapter's TLS and SASL settings), bounded by the ops timeouts unless the URL set its own.
func operationsConfig(cfg Config, x urlExtra) *sarama.Config {
	sc := StoreSaramaConfig(cfg.Sarama)
	if x.dialTimeout == 0 {
		sc.Net.DialTimeout = opsDialTimeout
	}
	if x.readTimeout == 0 {
		sc.Net.ReadTimeout = opsReadTimeout
	}
	if sc.Metadata.Timeout == 0 {
		sc.Metadata.Timeout = opsMetadataTimeout
	}
	return sc
}

// configFromURL builds the adapter's Config from u without connecting or reading a file: the
// TLS files (tls_ca, tls_cert, tls_key) are read by openConfig.
func configFromURL(u *url.URL, opts brokerurl.Options) (Config, error) {
	cfg, _, err := parseURL(u, opts)
	return cfg, err
}

// openConfig is configFromURL with the TLS files read into Config.Sarama.Net.TLS.Config.
func openConfig(u *url.URL, opts brokerurl.Options) (Config, urlExtra, error) {
	cfg, x, err := parseURL(u, opts)
	if err != nil {
		return Config{}, urlExtra{}, err
	}
	if err := x.files.load(cfg.Sarama); err != nil {
		return Config{}, urlExtra{}, err
	}
	if cfg.Sarama != nil && cfg.Sarama.Net.SASL.Enable && cfg.Sarama.Net.SASL.Mechanism == sarama.SASLTypePlaintext && !cfg.Sarama.Net.TLS.Enable {
		cfg.Logger.Warn("kafka:// with sasl=plain and no tls: the password crosses the network as it is; add tls=true",
			"url", brokerurl.Redact(u.String()))
	}
	return cfg, x, nil
}

// saslMechanisms maps the sasl parameter's values to Sarama's mechanisms.
var saslMechanisms = map[string]sarama.SASLMechanism{
	"plain":         sarama.SASLTypePlaintext,
	"scram-sha-256": sarama.SASLTypeSCRAMSHA256,
	"scram-sha-512": sarama.SASLTypeSCRAMSHA512,
}

// parseURL reads u into a Config, the names of the TLS files to read and the timeouts it sets.
func parseURL(u *url.URL, opts brokerurl.Options) (Config, urlExtra, error) {
	p := brokerurl.NewParams(u)
	cfg := Config{
		Brokers:               strings.Split(u.Host, ","),
		ConsumerGroup:         p.String("group", ""),
		AtLeastOnce:           p.Bool("at_least_once", false),
		TransactionalIDPrefix: p.String("transactional_id_prefix", ""),
		Logger:                opts.LoggerOrDiscard(),
	}
	partitions := p.Int("partitions", 0)
	replication := p.Int("replication_factor", 0)
	version := p.String("version", "")
	tlsOn := p.Has("tls")
	tlsEnable := p.Bool("tls", false)
	files := tlsFiles{ca: p.String("tls_ca", ""), cert: p.String("tls_cert", ""), key: p.String("tls_key", "")}
	serverName := p.String("tls_server_name", "")
	skipVerify := p.Bool("tls_insecure_skip_verify", false)
	tlsParams := p.Has("tls_ca") || p.Has("tls_cert") || p.Has("tls_key") || p.Has("tls_server_name") || p.Has("tls_insecure_skip_verify")
	mechanism := p.OneOf("sasl", "", "plain", "scram-sha-256", "scram-sha-512")
	x := urlExtra{files: files, dialTimeout: p.Duration("dial_timeout", 0), readTimeout: p.Duration("read_timeout", 0)}
	if err := p.Done(); err != nil {
		return Config{}, urlExtra{}, err
	}
	bad := func(format string, a ...any) (Config, urlExtra, error) {
		return Config{}, urlExtra{}, fmt.Errorf("%w: kafka:// "+format, append([]any{brokerurl.ErrInvalidURL}, a...)...)
	}
	badParam := func(name, value, rule string) (Config, urlExtra, error) {
		return Config{}, urlExtra{}, &brokerurl.ParameterError{Scheme: "kafka", Name: name, Value: value, Rule: rule}
	}
	if u.Host == "" {
		return bad("needs at least one broker, as kafka://host:port[,host:port...]")
	}
	// A path or a fragment would otherwise be ignored. Either may be a piece of a password
	// with an unencoded / or # (kafka://user:12/34@host reads as host "user:12", path
	// "/34@host"): such a piece, which holds an @, is not shown.
	if u.Path != "" && u.Path != "/" {
		return bad("has a path%s, which it does not take: a topic is named by the command or the code (e.g. --topic), not the URL; a / in the user or password is written %%2F", shown(u.Path))
	}
	if u.Fragment != "" {
		return bad("has a fragment%s (the text after #), which it does not take; a # in the user or password is written %%23", shown(u.Fragment))
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"dial_timeout", x.dialTimeout}, {"read_timeout", x.readTimeout}} {
		if t.d == 0 && u.Query().Has(t.name) {
			return badParam(t.name, u.Query().Get(t.name), "must be a duration above zero such as 10s")
		}
	}
	if replication > math.MaxInt16 {
		return badParam("replication_factor", strconv.Itoa(replication), "must be at most "+strconv.Itoa(math.MaxInt16))
	}
	if partitions > math.MaxInt32 {
		return badParam("partitions", strconv.Itoa(partitions), "must be at most "+strconv.Itoa(math.MaxInt32))
	}
	cfg.Partitions, cfg.ReplicationFactor = int32(partitions), int16(replication)
	if tlsOn && !tlsEnable && tlsParams {
		return badParam("tls", "false", "contradicts the tls_ parameters given: drop tls=false, or them")
	}
	if (files.cert == "") != (files.key == "") {
		if files.cert == "" {
			return badParam("tls_key", files.key, "needs tls_cert, the client certificate it is the key of")
		}
		return badParam("tls_cert", files.cert, "needs tls_key, the certificate's private key")
	}
	user, password, hasUserinfo := "", "", u.User != nil
	if hasUserinfo {
		user = u.User.Username()
		password, _ = u.User.Password()
	}
	switch {
	case mechanism == "" && hasUserinfo:
		return bad("has a user in the URL but no parameter sasl: add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512 (the user and password are for SASL)")
	case mechanism != "" && (user == "" || password == ""):
		return badParam("sasl", mechanism, "needs the user and password in the URL, as kafka://user:password@host:port (percent-encoded)")
	}

	if version != "" || tlsEnable || tlsParams || mechanism != "" || x.dialTimeout > 0 || x.readTimeout > 0 {
		sc := sarama.NewConfig()
		// As for a configuration the adapter makes itself: nobody reads these metrics.
		sc.MetricRegistry = discardMetrics{}
		if version != "" {
			v, err := sarama.ParseKafkaVersion(version)
			if err != nil {
				return badParam("version", version, "must be a Kafka version such as 3.6.0")
			}
			if !cfg.AtLeastOnce && !v.IsAtLeast(sarama.V2_5_0_0) {
				return badParam("version", version, "must be at least 2.5.0 for the adapter's transactions; add at_least_once=true for older brokers")
			}
			sc.Version = v
		}
		if x.dialTimeout > 0 {
			sc.Net.DialTimeout = x.dialTimeout
		}
		if x.readTimeout > 0 {
			sc.Net.ReadTimeout = x.readTimeout
		}
		if tlsEnable || tlsParams {
			sc.Net.TLS.Enable = true
			sc.Net.TLS.Config = &tls.Config{
				MinVersion:         tls.VersionTLS12,
				ServerName:         serverName,
				InsecureSkipVerify: skipVerify, //nolint:gosec // asked for by tls_insecure_skip_verify=true
			}
		}
		if mechanism != "" {
			sc.Net.SASL.Enable = true
			sc.Net.SASL.Mechanism = saslMechanisms[mechanism]
			sc.Net.SASL.User = user
			sc.Net.SASL.Password = password
			switch mechanism {
			case "scram-sha-256":
				sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
			case "scram-sha-512":
				sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
			}
		}
		if err := sc.Validate(); err != nil {
			return bad("gives a client configuration sarama refuses: %v", err)
		}
		cfg.Sarama = sc
	}
	if cfg.ConsumerGroup == "" {
		if !opts.NoConsume {
			return bad("needs parameter group, the consumer group every subscription joins (e.g. ?group=billing)")
		}
		// Never consumes: the adapter requires a group but never joins it.
		cfg.ConsumerGroup = "millrace-cli"
	}
	return cfg, x, cfg.Validate()
}

// shown returns s quoted after a space, for an error message, or "" when s holds an @ (likely
// a piece of the userinfo, which an error never shows).
func shown(s string) string {
	if strings.Contains(s, "@") {
		return ""
	}
	return " " + strconv.Quote(s)
}

// load reads the TLS files into sc's TLS configuration (sc is nil when the URL names none).
func (f tlsFiles) load(sc *sarama.Config) error {
	if f == (tlsFiles{}) {
		return nil
	}
	tc := sc.Net.TLS.Config
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return &brokerurl.ParameterError{Scheme: "kafka", Name: "tls_ca", Value: f.ca, Rule: "must name a readable PEM file of CA certificates: " + readErr(err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return &brokerurl.ParameterError{Scheme: "kafka", Name: "tls_ca", Value: f.ca, Rule: "holds no PEM certificate"}
		}
		tc.RootCAs = pool
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return &brokerurl.ParameterError{Scheme: "kafka", Name: "tls_cert", Value: f.cert,
				Rule: "and tls_key=" + strconv.Quote(f.key) + " must name a PEM certificate and its private key: " + readErr(err)}
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return nil
}

// readErr is err's text without the operation Go's file errors begin with.
func readErr(err error) string {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// scramClient is the SCRAM conversation Sarama runs for SCRAM-SHA-256 and SCRAM-SHA-512, on
// github.com/xdg-go/scram (as Sarama's own examples do).
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

// Begin starts a conversation for the user.
func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conv = client.NewConversation()
	return nil
}

// Step answers the server's challenge.
func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

// Done reports whether the conversation is over.
func (c *scramClient) Done() bool { return c.conv.Done() }

// connect opens the client the broker's operations (and the reachability check) use, with the
// adapter's TLS and SASL settings (StoreSaramaConfig copies Config.Sarama) and the operations
// timeouts (operationsConfig). Its error is one line naming the URL without its password. It
// returns when ctx ends, with ctx.Err() wrapped (see newClient).
func connect(ctx context.Context, u *url.URL, cfg Config, x urlExtra) (sarama.Client, error) {
	where := brokerurl.Redact(u.String())
	if x.dialTimeout == 0 && x.readTimeout == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, opsConnectTimeout, errConnectTimeout)
		defer cancel()
	}
	client, err := newClient(ctx, cfg.Brokers, operationsConfig(cfg, x))
	if err == nil {
		return client, nil
	}
	if context.Cause(ctx) == errConnectTimeout {
		return nil, fmt.Errorf("connect to %s: no broker answered within %v (set dial_timeout or read_timeout for a slower cluster): %w", where, opsConnectTimeout, err)
	}
	// A broker answers a failed authentication with an error code, or (as kfake and proxies
	// do) by closing the connection: either way the credentials are the likely cause.
	if sc := cfg.Sarama; sc != nil && sc.Net.SASL.Enable &&
		(errors.Is(err, sarama.ErrSASLAuthenticationFailed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		hint := ""
		if !sc.Net.TLS.Enable {
			hint = ", or tls=true if the listener is TLS"
		}
		return nil, fmt.Errorf("connect to %s: SASL %s authentication of user %q failed: check the user and password in the URL%s (%w: %v)",
			where, sc.Net.SASL.Mechanism, sc.Net.SASL.User, hint, sarama.ErrSASLAuthenticationFailed, err)
	}
	return nil, fmt.Errorf("connect to %s: %w", where, err)
}

// errConnectTimeout is the cause of connect's own deadline.
var errConnectTimeout = errors.New("connect timeout")

// newClient is sarama.NewClient returning ctx.Err() when ctx ends first: NewClient takes no
// context, so it goes on in the background, and the client it may still return is closed.
func newClient(ctx context.Context, brokers []string, sc *sarama.Config) (sarama.Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		client sarama.Client
		err    error
	}
	done := make(chan result, 1)
	go func() {
		c, err := sarama.NewClient(brokers, sc)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		return r.client, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				_ = r.client.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// OpenAdapter opens the adapter u names, after checking a broker answers (and the TLS and SASL
// settings work).
func (urlDriver) OpenAdapter(ctx context.Context, u *url.URL, opts brokerurl.Options) (millrace.Adapter, error) {
	cfg, x, err := openConfig(u, opts)
	if err != nil {
		return nil, err
	}
	// New makes no call: check a broker answers, so an unreachable cluster fails here.
	client, err := connect(ctx, u, cfg, x)
	if err != nil {
		return nil, err
	}
	_ = client.Close()
	return New(cfg)
}

// Open opens the broker u names: a client for operations (with the adapter's TLS and SASL
// settings, and the operations timeouts unless the URL sets dial_timeout or read_timeout) and
// the adapter. It returns when ctx ends, with ctx.Err() wrapped.
func (urlDriver) Open(ctx context.Context, u *url.URL, opts brokerurl.Options) (brokerurl.Broker, error) {
	cfg, x, err := openConfig(u, opts)
	if err != nil {
		return nil, err
	}
	client, err := connect(ctx, u, cfg, x)
	if err != nil {
		return nil, err
	}
	b := &urlBroker{client: client, brokers: cfg.Brokers, keys: map[string]string{}}
	cfg.PartitionKey = b.partitionKey
	b.a, err = New(cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return b, nil
}

// urlBroker is Kafka opened by URL: replays are acknowledged (acks=all) publishes keyed by the
// dead letter's original key (Native content re-published exactly, see PublishNative), and dead
// letters are read from the adapter's dead-letter topics with removed marks in
// "<dlq>.replayed" (DeadLetterStore).
type urlBroker struct {
	a       *Adapter
	client  sarama.Client
	brokers []string // the URL's, for DeadLetterDestinations' extra clients

	mu       sync.Mutex
	keys     map[string]string   // message UUID -> record key of the replay being published
	producer sarama.SyncProducer // for PublishNative, connected on first use
}

var (
	_ brokerurl.Broker           = (*urlBroker)(nil)
	_ deadletter.NativePublisher = (*urlBroker)(nil)
)

// Adapter returns the adapter on this connection.
func (b *urlBroker) Adapter() millrace.Adapter { return b.a }

// DeadLetterDestinations lists the topics named like the adapter's dead-letter topics
// (<topic>.dlq; their "<dlq>.replayed" marker topics are not destinations), sorted, each with
// the number of dead letters the dead-letter store holds in it (its Count with no filter): the
// records still retained, less those replayed or purged. A topic whose partitions are all
// empty (first offset = end offset) holds none, whatever its marks (marks only hide records):
// it is not read. The others are read as the store does, to their end, destinationReaders at a
// time, each reader on a client of its own (a broker answers the requests of one connection in
// order, so readers sharing one would wait on each other's fetches). It returns when ctx ends.
func (b *urlBroker) DeadLetterDestinations(ctx context.Context) ([]brokerurl.Destination, error) {
	if err := b.client.RefreshMetadata(); err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	topics, err := b.client.Topics()
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	var names []string
	for _, t := range topics {
		if len(t) > len(DeadLetterSuffix) && strings.HasSuffix(t, DeadLetterSuffix) {
			names = append(names, t)
		}
	}
	slices.Sort(names)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		failed error // the first error, which cancels the other work
	)
	fail := func(err error) {
		mu.Lock()
		if failed == nil {
			failed = err
			cancel()
		}
		mu.Unlock()
	}
	const (
		read  = iota // to be read by a store
		empty        // depth 0
		gone         // deleted since the listing
	)
	state := make([]int, len(names))
	depths := make([]int64, len(names))
	// each runs fn(worker, i) for every i in todo, on n workers, until ctx ends.
	each := func(n int, todo []int, fn func(worker, i int)) {
		next := make(chan int)
		var wg sync.WaitGroup
		for w := range min(n, len(todo)) {
			wg.Go(func() {
				for i := range next {
					fn(w, i)
				}
			})
		}
	feed:
		for _, i := range todo {
			select {
			case next <- i:
			case <-ctx.Done():
				break feed
			}
		}
		close(next)
		wg.Wait()
	}

	all := make([]int, len(names))
	for i := range all {
		all[i] = i
	}
	each(destinationReaders, all, func(_, i int) {
		e, err := topicEmpty(b.client, names[i])
		switch {
		case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
			state[i] = gone
		case err != nil:
			fail(fmt.Errorf("kafka: count the dead letters of %s: %w", names[i], err))
		case e:
			state[i] = empty
		}
	})
	var toRead []int
	for i := range names {
		if state[i] == read {
			toRead = append(toRead, i)
		}
	}
	// Reader 0 uses the broker's client, the others one each, connected when needed.
	clients := make([]sarama.Client, min(destinationReaders, len(toRead)))
	defer func() {
		for _, c := range clients[min(1, len(clients)):] {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	each(destinationReaders, toRead, func(w, i int) {
		if ctx.Err() != nil {
			return
		}
		if clients[w] == nil {
			clients[w] = b.client
			if w > 0 {
				c, err := newClient(ctx, b.brokers, b.client.Config())
				if err != nil {
					fail(fmt.Errorf("kafka: connect a reader: %w", err))
					return
				}
				clients[w] = c
			}
		}
		depth, err := storeDepth(ctx, clients[w], names[i])
		switch {
		case errors.Is(err, deadletter.ErrDestinationNotFound):
			state[i] = gone
		case err != nil:
			fail(err)
		default:
			depths[i] = depth
		}
	})
	if failed != nil {
		return nil, failed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]brokerurl.Destination, 0, len(names))
	for i, n := range names {
		if state[i] != gone {
			out = append(out, brokerurl.Destination{Name: n, Topic: strings.TrimSuffix(n, DeadLetterSuffix), Depth: depths[i]})
		}
	}
	return out, nil
}

// destinationReaders bounds the dead-letter topics DeadLetterDestinations checks or reads at
// once (and the clients it connects for reading: destinationReaders-1 besides the broker's).
const destinationReaders = 4

// storeDepth returns the store's Count with no filter of the dead-letter topic dlq, read
// through client. It wraps deadletter.ErrDestinationNotFound when the topic is gone.
func storeDepth(ctx context.Context, client sarama.Client, dlq string) (int64, error) {
	s, err := NewDeadLetterStore(client, dlq, StoreConfig{})
	if err != nil {
		return 0, err
	}
	defer func() { _ = s.Close() }()
	depth, err := s.Count(ctx, deadletter.Filter{})
	if err != nil {
		return 0, fmt.Errorf("kafka: count the dead letters of %s: %w", dlq, err)
	}
	return depth, nil
}

// topicEmpty reports whether every partition of topic is empty: its first retained offset is
// its end offset (the store's reads stop at the same end, so they would read nothing).
func topicEmpty(client sarama.Client, topic string) (bool, error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return false, err
	}
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return false, fmt.Errorf("end offset of partition %d: %w", p, err)
		}
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return false, fmt.Errorf("first offset of partition %d: %w", p, err)
		}
		if oldest < end {
			return false, nil
		}
	}
	return true, nil
}

func (b *urlBroker) partitionKey(_ string, msg *message.Message) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.keys[msg.UUID]
	delete(b.keys, msg.UUID)
	return k, nil
}

// PrepareReplay keys the replay of rec with its original record key.
func (b *urlBroker) PrepareReplay(rec deadletter.Record, msg *message.Message) {
	b.mu.Lock()
	b.keys[msg.UUID] = rec.OriginalKey
	b.mu.Unlock()
}

// PublishNative re-publishes a dead letter's Native content exactly (the original record's
// headers in order, repeated names and binary values kept, as DeadLetterStore gives them
// back): one record with rec.Payload as its value, rec.OriginalKey as its key (none when
// empty), and exactly those headers, acknowledged by the brokers (acks=all). Fields that are
// not Kafka headers (another broker's) are refused with deadletter.ErrNotReplayable. The
// record carries no UUID header unless the original did: it is the original, not a copy
// millrace made.
func (b *urlBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	headers := make([]sarama.RecordHeader, 0, len(rec.Native))
	for _, f := range rec.Native {
		if f.Type != NativeHeader {
			return fmt.Errorf("%w: field %q is of type %q, not a Kafka header", deadletter.ErrNotReplayable, f.Name, f.Type)
		}
		headers = append(headers, sarama.RecordHeader{Key: []byte(f.Name), Value: f.Value})
	}
	p, err := b.nativeProducer()
	if err != nil {
		return err
	}
	pm := &sarama.ProducerMessage{Topic: topic, Headers: headers}
	if rec.Payload != nil {
		pm.Value = sarama.ByteEncoder(rec.Payload)
	}
	if rec.OriginalKey != "" {
		pm.Key = sarama.StringEncoder(rec.OriginalKey)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, _, err = p.SendMessage(pm)
	return err
}

// nativeProducer returns the producer of PublishNative, connecting it on first use.
func (b *urlBroker) nativeProducer() (sarama.SyncProducer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.producer == nil {
		p, err := sarama.NewSyncProducerFromClient(b.client)
		if err != nil {
			return nil, fmt.Errorf("connect a producer: %w", err)
		}
		b.producer = p
	}
	return b.producer, nil
}

// TopicExists reports whether topic is in the cluster metadata: the adapter never creates a
// topic on publish, and a publish to a missing topic would fail after Sarama's retries.
func (b *urlBroker) TopicExists(_ context.Context, topic string) (bool, error) {
	return TopicExists(b.client, topic)
}

// DeadLetterTopic names the dead-letter topic of topic, as the adapter does.
func (b *urlBroker) DeadLetterTopic(topic string) string { return b.a.DeadLetterTopic(topic) }

// DeadLetters returns the dead-letter topic dlq as a store, read through the broker's client.
func (b *urlBroker) DeadLetters(_ context.Context, dlq string) (deadletter.Store, error) {
	return NewDeadLetterStore(b.client, dlq, StoreConfig{})
}

// Close closes the adapter, the replay producer and the client.
func (b *urlBroker) Close() error {
	err := b.a.Close()
	b.mu.Lock()
	if b.producer != nil {
		_ = b.producer.Close()
	}
	b.mu.Unlock()
	_ = b.client.Close()
	return err
}
