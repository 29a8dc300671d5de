package nats

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
)

// fetchRetrySleep is the pause after a failed pull request or consumer lookup.
const fetchRetrySleep = 250 * time.Millisecond

// pullExpiry is how long one pull request of a subscription waits on the server for messages,
// and pullHeartbeat the idle heartbeat the server sends on an open request meanwhile (NATS 2.9
// has both). A subscription that hears nothing for two heartbeats while a request is open
// takes its requests for lost (a connection that died) and pulls again.
const (
	pullExpiry    = 5 * time.Second
	pullHeartbeat = pullExpiry / 2
)

// delivery is one JetStream delivery, kept in the Watermill message's context for
// DecodeAttempt, ScheduleRetry and DeadLetter. Nothing in it comes from message content.
type delivery struct {
	msg     jetstream.Msg
	meta    *jetstream.MsgMetadata
	settled atomic.Bool // a retry was scheduled or the message was terminated
	handed  time.Time   // when it was handed out to the consumer
}

// settle marks the delivery settled; false when it already was.
func (d *delivery) settle() bool { return d.settled.CompareAndSwap(false, true) }

func (d *delivery) unsettle() { d.settled.Store(false) }

type deliveryKey struct{}

func deliveryFrom(msg *message.Message) *delivery {
	d, _ := msg.Context().Value(deliveryKey{}).(*delivery)
	return d
}

// Subscriber returns a new subscriber. Closing it (the Watermill router does on shutdown) ends
// only its own subscriptions.
//
// Each Subscribe joins the durable pull consumer (Config.Durable) of the topic's stream,
// creating the stream and the consumer when they do not exist, and fetches at most the free
// part of Config.Window at a time. A message is handed to the consumer with its delivery
// (NumDelivered, stream sequence) in its context. Its settlement:
//
//   - Ack: JetStream Ack, unless ScheduleRetry or DeadLetter already settled it.
//   - Nack: nothing when ScheduleRetry (NakWithDelay) or DeadLetter (Term) settled it;
//     otherwise NakWithDelay(Config.NackDelay).
//   - A message whose headers a Watermill message cannot hold (a header with several values)
//     carries millrace.WithDecodeError, and is dead-lettered as Malformed with its headers as
//     they are.
func (a *Adapter) Subscriber() message.Subscriber {
	s := &subscriber{a: a, closing: make(chan struct{})}
	a.mu.Lock()
	if a.closed {
		close(s.closing)
		s.closed = true
	} else {
		a.subscribers[s] = struct{}{}
	}
	a.mu.Unlock()
	return s
}

type subscriber struct {
	a       *Adapter
	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

// Subscribe starts a subscription of topic; its channel closes when ctx ends or the
// subscriber is closed, after every message it handed out was settled.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("nats: subscribe to %q: subscriber closed", topic)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	cons, err := s.a.ensureConsumer(ctx, topic)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	stopAdvisories, err := s.a.watchMaxDeliveries(topic)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	sctx, cancel := context.WithCancel(ctx)
	go func() {
		<-s.closing
		cancel()
	}()
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer stopAdvisories()
		s.run(sctx, topic, cons, out)
	}()
	return out, nil
}

// run hands out messages until ctx ends, then waits for the settlements.
//
// It pulls on one inbox of its own, a new one after each reconnect (a message the server sends
// to a pull request that is just expiring still reaches it), and keeps the pull accounting in
// this one goroutine: asked is how many messages its open pull requests may still deliver,
// queue what arrived and waits for a free slot (at most Config.Window in flight). Whenever
// asked plus the queue falls below half of the window, it asks for the rest of the window, in
// the same step that saw the drop, so a subscription with a backlog always has a request open.
//
// nats.go's MessagesContext (v1.55.0), which it replaces, makes the same decision in Next but
// skips it while its pull goroutine has not yet marked the previous request sent
// (fetchInProgress is cleared after PublishRequest returns). With a batch of one (Window 1)
// the reply can arrive and be consumed within that gap: then no request is open, no
// heartbeat comes, and the iterator waits two heartbeats (one expiry) before it reports
// ErrNoHeartbeat. That was the Window-1 stall (TestWindowOneNeverWaitsForExpiry).
func (s *subscriber) run(ctx context.Context, topic string, cons jetstream.Consumer, out chan<- *message.Message) {
	cfg, nc := s.a.cfg, s.a.nc
	info := cons.CachedInfo()
	next := jetstream.DefaultAPIPrefix + "CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name
	slots := make(chan struct{}, cfg.Window) // one token per message in flight
	var inflight sync.WaitGroup
	defer func() {
		inflight.Wait()
		close(out)
	}()

	// Every inbox's subscription hands its messages to this loop. asked bounds what the server
	// sends, so arrivals rarely fills; when it does, nats.go holds the rest.
	arrivals := make(chan *nats.Msg, 2*cfg.Window+16)
	stopped := make(chan struct{})
	deliver := func(m *nats.Msg) {
		select {
		case arrivals <- m:
		case <-stopped:
		}
	}
	var inbox string
	var sub *nats.Subscription
	subscribe := func() error {
		in := nc.NewInbox()
		sb, err := nc.Subscribe(in, deliver)
		if err != nil {
			return err
		}
		// What the server sends beyond what was asked for (requests of before a reset of asked)
		// waits in nats.go up to this bound, then is dropped as a slow consumer's and
		// redelivered after AckWait.
		if err := sb.SetPendingLimits(2*cfg.Window+64, nats.DefaultSubPendingBytesLimit); err != nil {
			_ = sb.Unsubscribe()
			return err
		}
		inbox, sub = in, sb
		return nil
	}
	for {
		err := subscribe()
		if err == nil {
			break
		}
		cfg.Logger.Warn("nats: subscribe to the pull inbox failed", "topic", topic, "error", err)
		if sleep(ctx, fetchRetrySleep); ctx.Err() != nil {
			return
		}
	}
	// After a reconnect the subscription pulls on a new inbox. The server may still hold the
	// connection it had before (a connection that went silent stays open on its side until its
	// own pings fail, minutes later) with a subscription to the old inbox: requests on that
	// inbox would have their messages sent there, into nothing, whenever the live connection
	// is down. The old inbox stays subscribed until its requests have expired.
	type retiring struct {
		sub   *nats.Subscription
		until time.Time
	}
	var old []retiring
	retire := time.NewTimer(time.Hour)
	retire.Stop()
	defer retire.Stop()
	status := nc.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
	var queue []*nats.Msg
	defer func() {
		// Requests still open at the server deliver into an inbox nobody reads: JetStream
		// redelivers those messages after AckWait. What arrived is given back at once.
		_ = sub.Unsubscribe()
		for _, r := range old {
			_ = r.sub.Unsubscribe()
		}
		close(stopped)
		nc.RemoveStatusListener(status)
		for {
			select {
			case m := <-arrivals:
				if m.Reply != "" {
					queue = append(queue, m)
				}
				continue
			default:
			}
			break
		}
		for _, m := range queue {
			_ = m.Nak()
		}
	}()

	refill := (cfg.Window + 1) / 2 // pull again below half of the window, as MessagesContext
	// The queue holds at most Window normally (asked + queue <= Window when a request is
	// sent); up to 2 x Window when requests sent before a reset of asked deliver too.
	maxQueued := 2 * cfg.Window
	asked := 0
	var retry <-chan time.Time // after a failed request: no new one before it fires
	idle := time.NewTimer(2 * pullHeartbeat)
	defer idle.Stop()
	connected := true
	for {
		if retry == nil && asked+len(queue) < refill {
			n := cfg.Window - asked - len(queue)
			if err := publishPull(nc, next, inbox, n); err != nil {
				cfg.Logger.Warn("nats: pull request failed", "topic", topic, "error", err)
				retry = time.After(fetchRetrySleep)
			} else {
				asked += n
				idle.Reset(2 * pullHeartbeat)
			}
		}
		var free chan<- struct{}
		if len(queue) > 0 {
			free = slots
		}
		in := arrivals
		if len(queue) >= maxQueued {
			in = nil // bounded: the rest waits in arrivals and in nats.go (see subscribe)
		}
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			idle.Reset(2 * pullHeartbeat)
			code := m.Header.Get("Status")
			if m.Reply != "" || code == "" || len(m.Data) > 0 { // a delivery (its reply is the ack subject)
				asked = max(asked-1, 0)
				queue = append(queue, m)
				continue
			}
			switch left, ok := pendingLeft(m); {
			case code == "100": // idle heartbeat
			case ok: // a request ended (408 expired, 409 batch or size limit) with left undelivered
				asked = max(asked-left, 0)
			case code == "404": // no messages (only for no_wait requests, which are not sent)
			default: // the server refused or dropped requests (409, 400, ...): pull anew
				cfg.Logger.Warn("nats: pull request ended by the server; pulling again", "topic", topic,
					"status", code, "description", m.Header.Get("Description"))
				asked = 0
				retry = time.After(fetchRetrySleep)
			}
		case free <- struct{}{}:
			m := queue[0]
			queue[0] = nil
			queue = queue[1:]
			inflight.Add(1)
			go func() {
				defer func() { <-slots; inflight.Done() }()
				s.handOut(ctx, topic, &pulledMsg{m: m, nc: nc}, out)
			}()
		case <-idle.C:
			if asked > 0 { // no message and no heartbeat for two heartbeats: the requests are gone
				cfg.Logger.Warn("nats: no heartbeat from the open pull requests; pulling again", "topic", topic)
				asked = 0
			}
			idle.Reset(2 * pullHeartbeat)
		case st := <-status:
			switch {
			case st == nats.RECONNECTING:
				connected = false
			case st == nats.CONNECTED && !connected: // requests sent before may be gone with the connection
				connected = true
				asked = 0
				prev := sub
				if err := subscribe(); err != nil {
					cfg.Logger.Warn("nats: subscribe to a new pull inbox failed; pulling on the old one", "topic", topic, "error", err)
					break
				}
				old = append(old, retiring{sub: prev, until: time.Now().Add(pullExpiry + pullHeartbeat)})
				retire.Reset(time.Until(old[0].until))
			}
		case <-retire.C:
			for len(old) > 0 && !old[0].until.After(time.Now()) {
				_ = old[0].sub.Unsubscribe()
				old = old[1:]
			}
			if len(old) > 0 {
				retire.Reset(time.Until(old[0].until))
			}
		case <-retry:
			retry = nil
		}
	}
}

// pullRequest is the body of a JetStream pull request, with the fields NATS 2.9 knows.
type pullRequest struct {
	Batch     int           `json:"batch"`
	Expires   time.Duration `json:"expires,omitempty"`
	Heartbeat time.Duration `json:"idle_heartbeat,omitempty"`
}

// publishPull asks the consumer (next is its CONSUMER.MSG.NEXT subject) for n messages, to be
// delivered to inbox within pullExpiry, with idle heartbeats meanwhile.
func publishPull(nc *nats.Conn, next, inbox string, n int) error {
	body, err := json.Marshal(pullRequest{Batch: n, Expires: pullExpiry, Heartbeat: pullHeartbeat})
	if err != nil {
		return err
	}
	return nc.PublishRequest(next, inbox, body)
}

// pendingLeft reads how many messages a request the server ended still had to deliver
// (Nats-Pending-Messages); ok is false when the status carries no such count.
func pendingLeft(m *nats.Msg) (int, bool) {
	v := m.Header.Get("Nats-Pending-Messages")
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// pulledMsg is a delivery from the subscription's inbox as a jetstream.Msg. Its metadata and
// acknowledgements are nats.go's (the JetStream methods of *nats.Msg: same reply-subject
// parsing, same ack bodies as package jetstream).
type pulledMsg struct {
	m  *nats.Msg
	nc *nats.Conn
}

var _ jetstream.Msg = (*pulledMsg)(nil)

func (p *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := p.m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jetstream.ErrNotJSMessage, err)
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

func (p *pulledMsg) Data() []byte                        { return p.m.Data }
func (p *pulledMsg) Headers() nats.Header                { return p.m.Header }
func (p *pulledMsg) Subject() string                     { return p.m.Subject }
func (p *pulledMsg) Reply() string                       { return p.m.Reply }
func (p *pulledMsg) Ack() error                          { return p.m.Ack() }
func (p *pulledMsg) DoubleAck(ctx context.Context) error { return p.m.AckSync(nats.Context(ctx)) }
func (p *pulledMsg) Nak() error                          { return p.m.Nak() }
func (p *pulledMsg) NakWithDelay(d time.Duration) error  { return p.m.NakWithDelay(d) }
func (p *pulledMsg) InProgress() error                   { return p.m.InProgress() }
func (p *pulledMsg) Term() error                         { return p.m.Term() }

// TermWithReason sends "+TERM <reason>" (NATS 2.10.4 and later; older servers ignore it).
func (p *pulledMsg) TermWithReason(reason string) error {
	return p.nc.Publish(p.m.Reply, []byte("+TERM "+reason))
}

// handOut gives one delivery to the consumer and settles it as the consumer says.
func (s *subscriber) handOut(ctx context.Context, topic string, jm jetstream.Msg, out chan<- *message.Message) {
	meta, err := jm.Metadata()
	if err != nil { // not a JetStream delivery: nothing to settle
		s.a.cfg.Logger.Warn("nats: delivery without JetStream metadata", "topic", topic, "error", err)
		return
	}
	d := &delivery{msg: jm, meta: meta}
	msg, derr := decodeMessage(jm)
	mctx := context.WithValue(context.Background(), deliveryKey{}, d)
	if derr != nil {
		mctx = millrace.WithDecodeError(mctx, derr)
	}
	msg.SetContext(mctx)
	// No InProgress here: on NATS 2.9.10 an in-progress ack per message stalled pull
	// consumption for the pull request's expiry (30 s) now and then. Config.Validate keeps
	// two budgets (the wait for a slot, then the handler) below AckWait instead.
	d.handed = time.Now()
	select {
	case out <- msg:
	case <-ctx.Done():
		// Not handed out: give it back at once. JetStream has counted the delivery.
		_ = jm.Nak()
		return
	}
	var giveUp <-chan time.Time
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-ctx.Done():
		// The subscription ends: wait for the verdict of a handler that still runs, but not
		// past AckWait, after which JetStream redelivers the message anyway.
		t := time.NewTimer(s.a.cfg.AckWait)
		defer t.Stop()
		giveUp = t.C
	}
	select {
	case <-giveUp:
		s.a.cfg.Logger.Warn("nats: no verdict for a message within AckWait after its subscription ended; JetStream delivers it again", "topic", topic, "seq", meta.Sequence.Stream)
	case <-msg.Acked():
		if d.settle() {
			if err := jm.Ack(); err != nil {
				s.a.cfg.Logger.Warn("nats: ack failed; the message is delivered again after AckWait", "topic", topic, "seq", meta.Sequence.Stream, "error", err)
			}
		}
	case <-msg.Nacked():
		if d.settle() {
			if err := jm.NakWithDelay(s.a.cfg.NackDelay); err != nil {
				s.a.cfg.Logger.Warn("nats: nak failed; the message is delivered again after AckWait", "topic", topic, "seq", meta.Sequence.Stream, "error", err)
			}
		}
	}
}

// decodeMessage builds the Watermill message of a delivery. It always returns a message (the
// payload and every header it can hold) and an error when a header has several values.
func decodeMessage(jm jetstream.Msg) (*message.Message, error) {
	h := jm.Headers()
	var uuid string
	md := make(message.Metadata, len(h))
	var err error
	for k, vs := range h {
		if len(vs) != 1 {
			if err == nil {
				err = fmt.Errorf("nats: header %q has %d values; a Watermill message holds one", k, len(vs))
			}
			if len(vs) == 0 {
				continue
			}
		}
		if k == UUIDHeader {
			uuid = vs[0]
			continue
		}
		md[decodeKey(k)] = vs[0]
	}
	msg := message.NewMessage(uuid, jm.Data())
	msg.Metadata = md
	return msg, err
}

// Close ends the subscriber's subscriptions and waits until their messages are settled.
func (s *subscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.a.mu.Lock()
	delete(s.a.subscribers, s)
	s.a.mu.Unlock()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
