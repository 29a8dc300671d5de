package redisstream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/redisguard"
)

// BrokerName is the adapter's name in Attempts and dead-letter records.
const BrokerName = "redisstream"

// Adapter implements millrace.Adapter on Redis Streams consumer groups. Create it with New;
// several adapters may live in one process, each with its own connection and state.
type Adapter struct {
	cfg       Config
	client    redis.UniversalClient
	ownClient bool
	acks      *acker
	scripts   scripts

	mu         sync.RWMutex
	thresholds map[string]thresholds // per stream, set by Provision
	groups     map[string]struct{}   // streams whose group this adapter created or found
	closed     bool
	closing    chan struct{}
	subs       map[*subscription]struct{}
	bg         sync.WaitGroup // acker, subscription loops and their clean-ups
	nextSub    atomic.Uint64
	// maxBlock is the longest XREADGROUP BLOCK: below the client's read timeout, which go-redis
	// does not extend for a command sent with Do (see maxBlockFor).
	maxBlock time.Duration

	stats counters
}

var _ millrace.Adapter = (*Adapter)(nil)

// New validates cfg and returns an adapter. It performs no I/O, except on a cluster client
// (Config.Client a *redis.ClusterClient): one CLUSTER SLOTS round trip, bounded by 2 s, to find
// the node clients it has already, so that the dial hook goes on them; an error there is
// ignored. An unreachable Redis shows up at the first Provision, Subscribe or Publish. It adds a dial hook to the client (its own, or
// Config.Client) that drops dead pooled connections together after a silent connection loss;
// see Connection loss in the package documentation.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if cfg.Consumer == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "consumer"
		}
		cfg.Consumer = host
	}
	a := &Adapter{
		cfg:        cfg,
		client:     cfg.Client,
		thresholds: map[string]thresholds{},
		groups:     map[string]struct{}{},
		closing:    make(chan struct{}),
		subs:       map[*subscription]struct{}{},
		scripts:    newScripts(),
	}
	if a.client == nil {
		opts, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, &millrace.ConfigError{Field: "redisstream.Config.URL", Value: cfg.URL, Rule: "must be a redis:// or rediss:// URL: " + err.Error()}
		}
		a.client = redis.NewClient(opts)
		a.ownClient = true
	}
	redisguard.Install(a.client)
	a.maxBlock = maxBlockFor(a.client)
	a.acks = newAcker(a.client, cfg.Logger)
	a.acks.stats = &a.stats
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		a.acks.run(a.closing)
	}()
	return a, nil
}

// Client returns the Redis connection the adapter uses.
func (a *Adapter) Client() redis.UniversalClient { return a.client }

// Capabilities declares the PEL delivery count as native attempt counter and any per-entry
// delay (a delay's resolution is Config.ReclaimInterval), the first attempt's time: the
// entry ID's (when it was appended, on the server's clock), and the failed attempt's span
// context carried to the retry in the adapter's retry state (see ScheduleRetry).
func (a *Adapter) Capabilities() millrace.Capabilities {
	return millrace.Capabilities{
		Broker:             BrokerName,
		NativeAttemptCount: true,
		PerMessageDelay:    true,
		KnowsFirstAttempt:  true,
		// The failed attempt's span context is kept with the retry schedule (see trace.go).
		CarriesAttemptTrace: true,
	}
}

// Publisher returns a publisher that appends entries in watermill-redisstream's format. Its
// Close does nothing: the adapter owns the connection.
func (a *Adapter) Publisher() message.Publisher { return &publisher{a: a} }

// Subscriber returns a new subscriber. Each Subscribe call on it joins Config.Group as a new
// consumer. Closing it (the Watermill router does on shutdown) ends only its own subscriptions.
// It reads work streams: an entry is a message only when it is exactly a Watermill message, and
// no field of an entry is ever read as millrace state (a top-level millrace-dlq-* field makes the
// entry malformed like any other foreign field).
func (a *Adapter) Subscriber() message.Subscriber {
	return &subscriber{a: a, closing: make(chan struct{})}
}

// DeadLetterSubscriber returns a subscriber for dead-letter streams, as a tool draining them
// uses: each message is the original message of a dead letter with its metadata keys escaped
// (deadletter.EscapeKey) and the record fields added, so deadletter.FromMessage reads the record
// back. A dead letter whose original entry was not a Watermill message arrives with
// millrace.WithDecodeError and the original payload field, if any; DeadLetterStore reads
// such entries whole (Record.Native). Do not use it on a work stream: there the record fields
// would be whatever a producer wrote.
func (a *Adapter) DeadLetterSubscriber() message.Subscriber {
	return &subscriber{a: a, deadLetters: true, closing: make(chan struct{})}
}

// Provision records policy as the reclaim schedule of stream and creates the consumer group
// (and the stream) if missing. Calling it again replaces the schedule. On a Redis Cluster
// client it first refuses, with a *millrace.ConfigError, a stream whose dead-letter stream or
// retry schedule would not share its hash slot (CheckClusterSlots); router.Run provisions
// every handler's topic before it starts, so such a router does not start.
func (a *Adapter) Provision(ctx context.Context, stream string, policy millrace.RetryPolicy) error {
	if err := policy.Validate(); err != nil {
		return err
	}
	if err := a.ensureGroup(ctx, stream); err != nil {
		return err
	}
	a.mu.Lock()
	a.thresholds[stream] = newThresholds(&policy, a.cfg.MinIdle)
	a.mu.Unlock()
	return nil
}

// thresholdsFor returns the reclaim schedule of stream.
func (a *Adapter) thresholdsFor(stream string) thresholds {
	a.mu.RLock()
	t, ok := a.thresholds[stream]
	a.mu.RUnlock()
	if !ok {
		t = newThresholds(nil, a.cfg.MinIdle)
	}
	return t
}

// ensureGroup creates Config.Group on stream (and the stream) unless it exists. On a Redis
// Cluster it first refuses a stream whose keys would not share its slot (CheckClusterSlots),
// so that neither Provision nor Subscribe starts a consumer whose retries and dead letters
// would fail with CROSSSLOT.
func (a *Adapter) ensureGroup(ctx context.Context, stream string) error {
	if a.onCluster() {
		if err := a.CheckClusterSlots(stream); err != nil {
			return err
		}
	}
	err := a.client.XGroupCreateMkStream(ctx, stream, a.cfg.Group, a.cfg.GroupStartID).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisstream: create group %q on %q: %w", a.cfg.Group, stream, err)
	}
	a.mu.Lock()
	a.groups[stream] = struct{}{}
	a.mu.Unlock()
	return nil
}

// Streams returns the streams the adapter has joined as Config.Group, sorted.
func (a *Adapter) Streams() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]string, 0, len(a.groups))
	for s := range a.groups {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// DeadLetterTopic returns the dead-letter stream of stream (Config.DeadLetterStream).
func (a *Adapter) DeadLetterTopic(stream string) string { return a.cfg.DeadLetterStream(stream) }

// DecodeAttempt returns the attempt of a delivery: its PEL delivery count. The entry ID's time
// (when it was appended) stands for the first attempt's time.
func (a *Adapter) DecodeAttempt(msg *message.Message) millrace.Attempt {
	at := millrace.Attempt{Number: 1, Broker: BrokerName}
	d, ok := deliveryFrom(msg)
	if !ok {
		return at
	}
	at.Number = int(max(d.count, 1))
	at.NativeCount = int(d.count)
	at.NativeID = d.id
	at.OriginalTopic = d.stream
	at.FirstAttemptAt = d.added
	at.Source = millrace.SourceNative
	return at
}

// Close ends every subscription, flushes pending acknowledgements and, if the adapter opened
// the connection, closes it. An acknowledgement Redis refuses transiently (CLUSTERDOWN while a
// cluster fails over, a lost connection) is sent again until it goes through, so Close can
// take up to 5 s longer than the subscriptions take to stop; acks still failing then are
// dropped (logged) and their entries stay pending, recovered after MinIdle.
func (a *Adapter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	subs := make([]*subscription, 0, len(a.subs))
	for s := range a.subs {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	stopAll(subs)
	close(a.closing) // after the loops: they flush their clean-up against a live acker
	a.bg.Wait()
	var err error
	if a.ownClient {
		err = a.client.Close()
	}
	return err
}

// register adds s to the running subscriptions, unless the adapter is closed.
func (a *Adapter) register(s *subscription) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return millrace.ErrClosed
	}
	a.subs[s] = struct{}{}
	a.bg.Add(1)
	return nil
}

func (a *Adapter) unregister(s *subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}

// consumerName returns a consumer name unique to one subscription.
func (a *Adapter) consumerName() string {
	return fmt.Sprintf("%s-%s-%d", a.cfg.Consumer, watermill.NewShortUUID(), a.nextSub.Add(1))
}

// isClosed reports whether Close was called.
func (a *Adapter) isClosed() bool {
	select {
	case <-a.closing:
		return true
	default:
		return false
	}
}

// maxBlockFor returns the longest XREADGROUP BLOCK the client allows: half its read timeout
// (go-redis applies the read timeout to a blocking command sent with Do), or no limit when it
// has none. A client of unknown type is assumed to have go-redis's default of 3 s.
func maxBlockFor(c redis.UniversalClient) time.Duration {
	rt := 3 * time.Second
	switch c := c.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	case *redis.Ring:
		rt = c.Options().ReadTimeout
	}
	if rt <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return max(rt/2, time.Millisecond)
}

var errNoDelivery = errors.New("redisstream: message was not delivered by this adapter's subscriber")
