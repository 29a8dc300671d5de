package nats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/satmath"
)

// fetchRetrySleep is the pause after a failed pull request or consumer lookup.
const fetchRetrySleep = 250 * time.Millisecond

// consumerTimeout bounds the re-creation of a consumer the server said is gone.
const consumerTimeout = 5 * time.Second

// recreateMin and recreateMax bound the pause between two re-creations of a consumer the
// server keeps saying is gone (a JetStream outage answers every pull request with 503): the
// first goes at once, the next after recreateMin, doubling up to recreateMax. A delivery on
// the current inbox (the consumer works) starts the sequence again.
const (
	recreateMin = 250 * time.Millisecond
	recreateMax = 5 * time.Second
)

// logEvery is the least time between two log lines of one kind a subscription repeats (a
// consumer gone, a refused pull request); the next line counts those left out meanwhile.
const logEvery = 5 * time.Second

// backoff is the pause before each next attempt: 0, then min doubling up to max.
type backoff struct {
	min, max, cur time.Duration
}

// next returns the pause before the next attempt.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
		return 0
	}
	d := b.cur
	b.cur = min(satmath.Mul(2, b.cur), b.max)
	return d
}

// reset makes the next attempt go at once.
func (b *backoff) reset() { b.cur = 0 }

// logThrottle lets one log line of a kind through per every.
type logThrottle struct {
	every      time.Duration
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now, and how many were left out since the
// last one.
func (t *logThrottle) allow(now time.Time) (left int, ok bool) {
	if !t.last.IsZero() && now.Sub(t.last) < t.every {
		t.suppressed++
		return 0, false
	}
	left, t.suppressed, t.last = t.suppressed, 0, now
	return left, true
}

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
	pulls   map[string]*pullState // topic: the latest subscription's pull state (read by tests)
}

// pullState is what tests read of a subscription's pull loop.
type pullState struct {
	inbox     atomic.Pointer[string] // the current pull inbox
	maxQueued atomic.Int64           // the longest the queue has been
	recreates atomic.Int64           // re-creations of the consumer attempted
}

func (s *subscriber) pullState(topic string) *pullState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pulls == nil {
		s.pulls = map[string]*pullState{}
	}
	if s.pulls[topic] == nil {
		s.pulls[topic] = &pullState{}
	}
	return s.pulls[topic]
}

// inbox is the current pull inbox of topic's latest subscription, "" before it has one.
func (s *subscriber) inbox(topic string) string {
	if p := s.pullState(topic).inbox.Load(); p != nil {
		return *p
	}
	return ""
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
	if err == nil {
		err = s.a.checkRequestBatch(cons)
	}
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

// checkRequestBatch refuses a Window above the consumer's max_request_batch: the server
// would refuse every pull request (409 Exceeded MaxRequestBatch).
func (a *Adapter) checkRequestBatch(cons jetstream.Consumer) error {
	info := cons.CachedInfo()
	if mrb := info.Config.MaxRequestBatch; mrb > 0 && a.cfg.Window > mrb {
		return &millrace.ConfigError{Field: "nats.Config.Window", Value: strconv.Itoa(a.cfg.Window), Limit: true,
			Rule: "must not exceed the max_request_batch (" + strconv.Itoa(mrb) + ") of consumer " + info.Name + " on stream " + info.Stream + ": JetStream refuses a pull request for more"}
	}
	return nil
}

// run hands out messages until ctx ends, then waits for the settlements.
//
// It pulls on an inbox of its own and keeps the pull accounting (pullCounter) in this one
// goroutine: the counter says how many messages the open requests on the current inbox may
// still deliver; queue holds what arrived and waits for a free slot (at most Config.Window in
// flight). Whenever the open requests plus the queue fall below half of the window, it asks
// for the rest of the window, in the same step that saw the drop, so a subscription with a
// backlog always has a request open. The queue never holds more than Window: a delivery
// beyond that (from requests of before a reset, which still deliver on their old inbox) is
// given back at once (Nak), so a queued message waits at most one budget for a slot, as
// Config.Validate assumes.
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
	var bg sync.WaitGroup // a re-creation or a limit check under way
	defer func() {
		inflight.Wait()
		bg.Wait()
		close(out)
	}()

	// Every inbox's subscription hands its messages to this loop, which always reads them (it
	// gives back what exceeds the queue's bound); nats.go holds the rest meanwhile.
	arrivals := make(chan *nats.Msg, satmath.AddInt(cfg.Window, 16))
	stopped := make(chan struct{})
	deliver := func(m *nats.Msg) {
		select {
		case arrivals <- m:
		case <-stopped:
		}
	}
	count := newPullCounter(cfg.Window, info.Stream, info.Name)
	state := &pullState{}
	s.mu.Lock()
	if s.pulls == nil {
		s.pulls = map[string]*pullState{}
	}
	s.pulls[topic] = state
	s.mu.Unlock()
	var inbox string
	var sub *nats.Subscription
	subscribe := func() error {
		in := nc.NewInbox()
		sb, err := nc.Subscribe(in, deliver)
		if err != nil {
			return err
		}
		// What the server sends beyond what was asked for waits in nats.go up to this bound,
		// then is dropped as a slow consumer's and redelivered after AckWait.
		if err := sb.SetPendingLimits(satmath.AddInt(satmath.MulInt(2, cfg.Window), 64), nats.DefaultSubPendingBytesLimit); err != nil {
			_ = sb.Unsubscribe()
			return err
		}
		inbox, sub = in, sb
		count.reset(sb)
		state.inbox.Store(&in)
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
	// After a reset (a reconnect, the idle watchdog, a request refused without a count) the
	// subscription pulls on a new inbox. After a reconnect the server may still hold the
	// connection it had before (a connection that went silent stays open on its side until its
	// own pings fail, minutes later) with a subscription to the old inbox: requests on that
	// inbox would have their messages sent there, into nothing, whenever the live connection
	// is down. The old inbox stays subscribed until its requests have expired; what it
	// delivers meanwhile is handed out, but not counted (pullCounter).
	type retiring struct {
		sub   *nats.Subscription
		until time.Time
	}
	var old []retiring
	retire := time.NewTimer(time.Hour)
	retire.Stop()
	defer retire.Stop()
	newInbox := func(why string) {
		prev := sub
		if err := subscribe(); err != nil {
			// Still pulling on the old inbox, from zero: what its earlier requests deliver is
			// counted, and the queue's bound gives back what exceeds the window.
			cfg.Logger.Warn("nats: subscribe to a new pull inbox failed; pulling on the old one", "topic", topic, "after", why, "error", err)
			count.reset(sub)
			return
		}
		old = append(old, retiring{sub: prev, until: time.Now().Add(pullExpiry + pullHeartbeat)})
		retire.Reset(time.Until(old[0].until))
	}
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
				if k := count.arrive(m); k == arriveDelivery || k == arriveOldDelivery {
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

	var retry <-chan time.Time // after a failed request: no new one before it fires
	idle := time.NewTimer(2 * pullHeartbeat)
	defer idle.Stop()
	connected := true
	var forged, overflow int // messages dropped: not the consumer's; given back beyond the window

	// The consumer gone: no pull requests until it was created again. The re-creation and the
	// check of a refusal for max_request_batch run beside the loop (one of each at a time), so
	// it goes on handing out what is queued and reading arrivals meanwhile.
	type recreation struct {
		cons    jetstream.Consumer
		created bool
		err     error
	}
	var gone, recreating, checking bool
	var recreateAt <-chan time.Time
	recreated := make(chan recreation, 1)
	checked := make(chan error, 1)
	bo := backoff{min: recreateMin, max: recreateMax}
	goneLog := logThrottle{every: logEvery}
	failLog := logThrottle{every: logEvery}
	refusedLog := logThrottle{every: logEvery}
	scheduleRecreate := func() {
		if d := bo.next(); d > 0 {
			recreateAt = time.After(d)
		} else {
			c := make(chan time.Time, 1)
			c <- time.Time{}
			recreateAt = c
		}
	}
	for {
		if n := count.want(len(queue)); retry == nil && !gone && n > 0 {
			if err := publishPull(nc, next, inbox, n); err != nil {
				cfg.Logger.Warn("nats: pull request failed", "topic", topic, "error", err)
				retry = time.After(fetchRetrySleep)
			} else {
				count.sent(n)
				idle.Reset(2 * pullHeartbeat)
			}
		}
		var free chan<- struct{}
		if len(queue) > 0 {
			free = slots
		}
		select {
		case <-ctx.Done():
			return
		case m := <-arrivals:
			switch k := count.arrive(m); k {
			case arriveDelivery, arriveOldDelivery:
				if k == arriveDelivery {
					idle.Reset(2 * pullHeartbeat)
					bo.reset()
				}
				if len(queue) >= cfg.Window {
					// Requests of before a reset delivered too: beyond the window a message
					// would wait more than one budget for a slot. JetStream delivers it again.
					overflow++
					_ = m.NakWithDelay(cfg.NackDelay)
					cfg.Logger.Debug("nats: delivery beyond the window given back", "topic", topic, "given_back", overflow)
					continue
				}
				queue = append(queue, m)
				if n := int64(len(queue)); n > state.maxQueued.Load() {
					state.maxQueued.Store(n)
				}
			case arriveForged:
				forged++
				cfg.Logger.Warn("nats: message on the pull inbox that is not a delivery of the subscription's consumer; dropped",
					"topic", topic, "stream", info.Stream, "consumer", info.Name, "reply", m.Reply, "dropped", forged)
			case arriveHeartbeat, arriveEnded, arriveNoMessages:
				idle.Reset(2 * pullHeartbeat)
			case arriveStale:
			case arriveRefused:
				if !checking && requestBatchRefusal(m) {
					checking = true
					bg.Add(1)
					go func(cons jetstream.Consumer) {
						defer bg.Done()
						checked <- s.requestBatchCheck(ctx, cons)
					}(cons)
				}
				if left, ok := refusedLog.allow(time.Now()); ok {
					cfg.Logger.Warn("nats: pull request ended by the server; pulling again", "topic", topic,
						"status", m.Header.Get("Status"), "description", m.Header.Get("Description"), "repeated", left)
				}
				newInbox("a refused pull request")
				retry = time.After(fetchRetrySleep)
			case arriveConsumerGone:
				if left, ok := goneLog.allow(time.Now()); ok {
					cfg.Logger.Warn("nats: the durable consumer is gone; creating it again", "topic", topic, "durable", cfg.Durable,
						"status", m.Header.Get("Status"), "description", m.Header.Get("Description"), "repeated", left)
				}
				if !gone {
					gone = true
					if !recreating && recreateAt == nil {
						scheduleRecreate()
					}
				}
			}
		case <-recreateAt:
			recreateAt = nil
			recreating = true
			state.recreates.Add(1)
			// Created again with the adapter's deliver policy, from the stream's first message,
			// never from after the last acknowledged one: the deleted consumer's ack floor is
			// gone, and a later start would lose every message below it that is not settled (a
			// retry waiting on its delay, another subscription's deliveries). Every retained
			// message comes again: duplicates, which the idempotency lease turns into DONE,
			// never a loss.
			bg.Add(1)
			go func() {
				defer bg.Done()
				cctx, cancel := context.WithTimeout(ctx, consumerTimeout)
				defer cancel()
				c, created, err := s.a.ensureConsumerCreated(cctx, topic)
				recreated <- recreation{cons: c, created: created, err: err}
			}()
		case r := <-recreated:
			recreating = false
			if ctx.Err() != nil {
				return
			}
			if r.err != nil {
				if s.recreateRefused(topic, r.err) {
					return
				}
				if left, ok := failLog.allow(time.Now()); ok {
					cfg.Logger.Warn("nats: creating the durable consumer again failed; trying again", "topic", topic, "durable", cfg.Durable,
						"error", r.err, "repeated", left)
				}
				scheduleRecreate()
				continue
			}
			switch {
			case r.created:
				cfg.Logger.Error("nats: the durable consumer was deleted; created it again from the stream's first message: every message the stream retains is delivered again",
					"topic", topic, "stream", info.Stream, "durable", cfg.Durable)
			}
			cons, gone = r.cons, false
			newInbox("the consumer was created again")
		case err := <-checked:
			checking = false
			if err != nil {
				cfg.Logger.Error("nats: the consumer's max_request_batch is below Window; the subscription ends", "topic", topic, "error", err)
				return
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
			if count.open() { // no message and no heartbeat for two heartbeats: the requests are gone
				cfg.Logger.Warn("nats: no heartbeat from the open pull requests; pulling again", "topic", topic)
				newInbox("no heartbeat")
			}
			idle.Reset(2 * pullHeartbeat)
		case st := <-status:
			switch {
			case st == nats.RECONNECTING:
				connected = false
			case st == nats.CONNECTED && !connected: // requests sent before may be gone with the connection
				connected = true
				newInbox("a reconnect")
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

// requestBatchRefusal reports whether m refused a pull request for more than the
// consumer's max_request_batch.
func requestBatchRefusal(m *nats.Msg) bool {
	return m.Header.Get("Status") == "409" && strings.Contains(strings.ToLower(m.Header.Get("Description")), "exceeded maxrequestbatch")
}

// requestBatchCheck asks the server for the consumer's max_request_batch after a refusal for
// exceeding it, and returns the ConfigError when it is now below Window (set after Subscribe
// checked it): every request would be refused, so the subscription ends. nil when the server
// could not be asked: the next refusal asks again.
func (s *subscriber) requestBatchCheck(ctx context.Context, cons jetstream.Consumer) error {
	cctx, cancel := context.WithTimeout(ctx, consumerTimeout)
	defer cancel()
	if _, err := cons.Info(cctx); err != nil {
		return nil
	}
	return s.a.checkRequestBatch(cons)
}

// recreateRefused reports whether err, from creating the durable consumer again after the
// server said it is gone (409 Consumer Deleted, or 503 No Responders to a pull request),
// means the subscription must end: the server refused it (4xx, the stream is gone, say); an
// Error is logged. Otherwise (no answer, JetStream unavailable) the subscription tries again.
func (s *subscriber) recreateRefused(topic string, err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 {
		s.a.cfg.Logger.Error("nats: the durable consumer is gone and the server refused to create it again; the subscription ends",
			"topic", topic, "durable", s.a.cfg.Durable, "error", err)
		return true
	}
	return false
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

// pulledMsg is a delivery from the subscription's inbox as a jetstream.Msg, with package
// jetstream's semantics (v1.55.0, jetstream/message.go): the same errors for a message
// without a subscription or reply (ErrMsgNotBound, ErrMsgNoReply) or whose reply is not an ack
// subject (ErrNotJSMessage), the same ack bodies, one settlement per message (a second Ack,
// Nak or Term returns ErrMsgAlreadyAckd; InProgress may be sent many times), and DoubleAck
// bounded by jetstream's default API timeout when ctx has no deadline.
type pulledMsg struct {
	m       *nats.Msg
	nc      *nats.Conn
	timeout time.Duration // DoubleAck's bound without a deadline; 0 means doubleAckTimeout

	mu   sync.Mutex
	ackd bool
}

var _ jetstream.Msg = (*pulledMsg)(nil)

var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// doubleAckTimeout bounds DoubleAck with a context without deadline, as jetstream's default
// API timeout (5 s, unexported) does.
const doubleAckTimeout = 5 * time.Second

func (p *pulledMsg) checkReply() error {
	if p == nil || p.m == nil || p.m.Sub == nil {
		return jetstream.ErrMsgNotBound
	}
	if p.m.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	return nil
}

func (p *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if err := p.checkReply(); err != nil {
		return nil, err
	}
	md, err := p.m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", jetstream.ErrNotJSMessage, err)
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

func (p *pulledMsg) Data() []byte         { return p.m.Data }
func (p *pulledMsg) Headers() nats.Header { return p.m.Header }
func (p *pulledMsg) Subject() string      { return p.m.Subject }
func (p *pulledMsg) Reply() string        { return p.m.Reply }
func (p *pulledMsg) Ack() error           { return p.ackReply(context.Background(), ackAck, false, 0, "") }
func (p *pulledMsg) DoubleAck(ctx context.Context) error {
	return p.ackReply(ctx, ackAck, true, 0, "")
}
func (p *pulledMsg) Nak() error { return p.ackReply(context.Background(), ackNak, false, 0, "") }
func (p *pulledMsg) NakWithDelay(d time.Duration) error {
	return p.ackReply(context.Background(), ackNak, false, d, "")
}
func (p *pulledMsg) InProgress() error {
	return p.ackReply(context.Background(), ackProgress, false, 0, "")
}
func (p *pulledMsg) Term() error { return p.ackReply(context.Background(), ackTerm, false, 0, "") }

// TermWithReason sends "+TERM <reason>" (NATS 2.10.4 and later; older servers ignore it).
func (p *pulledMsg) TermWithReason(reason string) error {
	return p.ackReply(context.Background(), ackTerm, false, 0, reason)
}

// ackReply is jetstream's jetStreamMsg.ackReply on the subscription's connection.
func (p *pulledMsg) ackReply(ctx context.Context, kind []byte, sync bool, delay time.Duration, reason string) error {
	if err := p.checkReply(); err != nil {
		return err
	}
	p.mu.Lock()
	done := p.ackd
	p.mu.Unlock()
	if done {
		return jetstream.ErrMsgAlreadyAckd
	}
	body := kind
	switch {
	case delay > 0:
		body = fmt.Appendf(nil, "%s {\"delay\": %d}", kind, delay.Nanoseconds())
	case reason != "":
		body = fmt.Appendf(nil, "%s %s", kind, reason)
	}
	var err error
	if sync {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			timeout := p.timeout
			if timeout <= 0 {
				timeout = doubleAckTimeout
			}
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		_, err = p.nc.RequestWithContext(ctx, p.m.Reply, body)
	} else {
		err = p.nc.Publish(p.m.Reply, body)
	}
	if err != nil {
		return err
	}
	if !bytes.Equal(kind, ackProgress) {
		p.mu.Lock()
		p.ackd = true
		p.mu.Unlock()
	}
	return nil
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
