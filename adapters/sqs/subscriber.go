package sqs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
)

const (
	// receiveRetrySleep is the pause after a failed receive.
	receiveRetrySleep = time.Second
	// HandOffWait is how long a subscription that is ending (its Subscribe context done, or
	// Close called) still offers the message its last receive got to the consumer. Watermill's
	// router reads a subscription's channel until the subscriber closes it, so it takes the
	// message at once; a consumer that stopped reading does not, and the message is then given
	// back (ChangeMessageVisibility 0).
	HandOffWait = time.Second
)

// Subscriber returns a new subscriber. Closing it (the Watermill router does on shutdown) ends
// only its own subscriptions. Each subscription runs Config.Pollers receive loops with a long
// poll of Config.WaitTime, each asking for up to 10 messages, as many as the subscription's
// Window (Config.Window) has room for, with ApproximateReceiveCount and
// ApproximateFirstReceiveTimestamp, which DecodeAttempt reads. Acks are deleted and
// visibility changed in batches (see "Batching and concurrency" in the package documentation).
//
// Ending a subscription (Close, or its Subscribe context) never burns an attempt: SQS counts a
// receive as soon as it hands a message out, cancelled request or not, so the receives in
// flight are not cancelled but left to finish (at most Config.WaitTime + CallTimeout), and the
// messages they got are handed to the consumer as ordinary deliveries, whose verdicts count as
// usual. Only a message the consumer does not take within
// HandOffWait (1 s) is given back (ChangeMessageVisibility 0); SQS has then counted a receive
// that no handler saw (this adapter does not count it as an attempt: see DecodeAttempt). A
// subscription ending does not cancel the handler contexts; a context ends with its delivery: after the verdict, or when the message's visibility timeout runs out
// while the subscription waits for that verdict at Close.
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

// subscriber runs one subscription (its pollers) per Subscribe call over the adapter's SQS client, so that
// Close ends exactly the subscriptions made through it, and bridges each delivery to the
// handler:
//
//   - it decodes the message and puts its SQS state (never read from metadata) into the message
//     context (DecodeAttempt, ScheduleRetry and DeadLetter read it there), and marks a delivery
//     whose attributes or receive count did not decode with millrace.WithDecodeError;
//   - it relays the handler's verdict: an ack deletes the message, a nack leaves it alone (SQS
//     makes it visible again when its visibility timeout ends: the retry delay set by
//     ScheduleRetry, or the queue's timeout after a failure). An ack of a message left to SQS's
//     RedrivePolicy leaves it alone too, so that SQS can move it.
type subscriber struct {
	a       *Adapter
	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

// Subscribe starts a subscription on topic's queue. The queue must exist, unless
// Config.CreateQueues is on (it is then created with the adapter's base attributes). The
// subscription ends when ctx ends or the subscriber is closed, as Close describes; the channel
// is closed once the last message it handed out has its verdict.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	a := s.a
	if err := a.checkGiveUp(topic); err != nil {
		return nil, err
	}
	url, _, err := a.ensureQueue(ctx, a.QueueName(topic), a.baseAttributes(a.QueueName(topic)))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, millrace.ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()

	// subCtx ends with ctx or at Close. Message contexts keep its values but not its end.
	subCtx, stop := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.closing:
		case <-subCtx.Done():
		}
		stop()
	}()
	out := make(chan *message.Message)
	sub := newSubscription(a, topic, url, out, a.cfg.Window)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer stop()
		sub.run(subCtx)
	}()
	return out, nil
}

// subscription is one Subscribe call: Config.Pollers receive loops sharing a Window of
// Config.Window slots, and the batchers of the queue's deletes and visibility changes.
type subscription struct {
	a          *Adapter
	topic, url string
	out        chan<- *message.Message
	// fifo: the queue is a FIFO queue; each message group's order is kept (deliverGroups).
	fifo bool
	// slots holds one token per message received and not yet settled (handed out and waiting
	// for its verdict, or for the delete after its ack, or being given back).
	slots      chan struct{}
	deletes    *batcher
	visibility *batcher
	settling   sync.WaitGroup // one per message received

	// pollersDone is closed once every poller has stopped: a FIFO group's members given back
	// while the subscription ends wait for it (see runGroup).
	pollersDone chan struct{}

	// untaken holds the messages the consumer did not take while the subscription ended; run
	// gives them back once every poller has stopped, so that no receive of this subscription
	// still in flight gets them again.
	mu      sync.Mutex
	untaken []untaken
}

type untaken struct {
	receipt   *string
	messageID string
}

// newSubscription returns the subscription of topic's queue at url, handing its messages to out,
// with room for window messages.
func newSubscription(a *Adapter, topic, url string, out chan<- *message.Message, window int) *subscription {
	return &subscription{
		a: a, topic: topic, url: url, out: out, fifo: isFIFOQueue(url),
		slots:       make(chan struct{}, window),
		pollersDone: make(chan struct{}),
		deletes:     newDeleteBatcher(a, url),
		visibility:  newVisibilityBatcher(a, url),
	}
}

// run starts the pollers and returns once they have stopped and every message they received
// is settled.
func (sub *subscription) run(ctx context.Context) {
	var pollers sync.WaitGroup
	for range sub.a.cfg.Pollers {
		pollers.Go(func() { sub.poll(ctx) })
	}
	pollers.Wait()
	close(sub.pollersDone)
	sub.mu.Lock()
	back := sub.untaken
	sub.untaken = nil
	sub.mu.Unlock()
	for _, u := range back {
		go func() {
			defer sub.settling.Done()
			sub.giveBack(ctx, u.receipt, u.messageID)
		}()
	}
	sub.settling.Wait()
}

// leave records a received message the consumer did not take, for run to give back.
func (sub *subscription) leave(receipt *string, messageID string) {
	sub.mu.Lock()
	sub.untaken = append(sub.untaken, untaken{receipt, messageID})
	sub.mu.Unlock()
}

// reserve takes room in the Window for one message, waiting for it unless ctx ends (then 0),
// and then for up to MaxReceiveBatch messages, as much as is free.
func (sub *subscription) reserve(ctx context.Context) int {
	if ctx.Err() != nil {
		return 0
	}
	select {
	case <-ctx.Done():
		return 0
	case sub.slots <- struct{}{}:
	}
	n := 1
	for n < MaxReceiveBatch {
		select {
		case sub.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func (sub *subscription) release(n int) {
	for range n {
		<-sub.slots
	}
}

// poll receives until ctx ends, each receive asking for as many messages as it reserved room
// for. A poll is never cancelled: it runs to its end, and what it received after ctx ended is
// delivered all the same (see handOff).
func (sub *subscription) poll(ctx context.Context) {
	a := sub.a
	input := &awssqs.ReceiveMessageInput{
		QueueUrl:              aws.String(sub.url),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
		},
		WaitTimeSeconds: int32(a.cfg.WaitTime / time.Second),
	}
	if sub.fifo {
		input.MessageSystemAttributeNames = append(input.MessageSystemAttributeNames, types.MessageSystemAttributeNameMessageGroupId)
	}
	for {
		n := sub.reserve(ctx)
		if n == 0 {
			return
		}
		if sub.fifo && (input.ReceiveRequestAttemptId == nil || input.MaxNumberOfMessages != int32(n)) {
			// One per receive, kept by the SDK's retries of it and by the next receive after a
			// failed one (same parameters): SQS answers a retry whose first answer was lost with
			// the same messages, instead of leaving them in flight (their groups locked) until
			// their visibility timeout.
			input.ReceiveRequestAttemptId = aws.String(watermill.NewUUID())
		}
		input.MaxNumberOfMessages = int32(n)
		pollCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.receiveTimeout())
		res, err := a.client.ReceiveMessage(pollCtx, input, longerRequests(a.cfg.receiveTimeout()))
		timedOut := errors.Is(pollCtx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil {
			sub.release(n)
			if timedOut {
				err = fmt.Errorf("no answer within WaitTime + CallTimeout (%s): %w", a.cfg.receiveTimeout(), err)
			}
			a.cfg.Logger.ErrorContext(ctx, "millrace sqs: cannot receive messages", "queue", sub.url, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(receiveRetrySleep):
			}
			continue
		}
		input.ReceiveRequestAttemptId = nil // answered: the next receive is a new one
		msgs := res.Messages
		if len(msgs) > n { // never from SQS: the surplus holds no slot and is given back at once
			a.cfg.Logger.ErrorContext(ctx, "millrace sqs: the endpoint returned more messages than asked for; the surplus is given back",
				"queue", sub.url, "asked", n, "got", len(msgs))
			for _, m := range msgs[n:] {
				sub.settling.Add(1)
				go func() { defer sub.settling.Done(); sub.giveBack(ctx, m.ReceiptHandle, aws.ToString(m.MessageId)) }()
			}
			msgs = msgs[:n]
		}
		sub.release(n - len(msgs))
		receivedAt := time.Now()
		batch := make([]waitingMsg, len(msgs))
		for i := range msgs {
			batch[i] = sub.decode(ctx, &msgs[i], receivedAt)
		}
		sub.deliver(ctx, batch)
	}
}

// waitingMsg is a message of a receive, decoded, waiting for its hand-off.
type waitingMsg struct {
	msg    *message.Message
	d      *delivery
	cancel context.CancelFunc
}

// decode turns a received SQS message into the message handed to the consumer, with its
// delivery in its context. The handler's context is not cancelled when the subscription ends:
// a handler running then finishes and its verdict counts. It ends with the relay of its
// verdict.
func (sub *subscription) decode(ctx context.Context, sm *types.Message, receivedAt time.Time) waitingMsg {
	msg, d := decodeMessage(sm)
	d.topic, d.queueURL, d.sub = sub.topic, sub.url, sub
	if !sub.a.receivesCount(sub.topic) {
		d.givenBack = sub.a.givenBack.count(d.messageID)
	}
	d.receivedAt = receivedAt
	d.hiddenUntil.Store(receivedAt.Add(sub.a.cfg.VisibilityTimeout).UnixNano())
	d.extended = make(chan struct{})
	msgCtx, cancel := context.WithCancel(withDelivery(context.WithoutCancel(ctx), d))
	if d.decodeErr != nil {
		msgCtx = millrace.WithDecodeError(msgCtx, d.decodeErr)
	}
	msg.SetContext(msgCtx)
	sub.settling.Add(1)
	return waitingMsg{msg: msg, d: d, cancel: cancel}
}

// deliver hands the messages of one receive to the consumer, in receive order, and leaves the
// relay of each verdict to a goroutine of its own. Once ctx has ended (the subscription is
// ending) the messages are still offered until HandOffWait has passed; those the consumer did
// not take are given back when the subscription's pollers have all stopped (see run).
func (sub *subscription) deliver(ctx context.Context, batch []waitingMsg) {
	if sub.fifo {
		sub.deliverGroups(ctx, batch)
		return
	}
	var handOffEnd time.Time // set once ctx has ended: the last moment to hand out this batch
	for i, r := range batch {
		if !sub.handOff(ctx, batch[i:], &handOffEnd) {
			close(r.d.extended)
			r.cancel()
			sub.release(1)
			sub.leave(&r.d.receipt, r.d.messageID) // given back by run, settling.Done then
			continue
		}
		sub.startExtension(ctx, r.d)
		go func() {
			defer sub.settling.Done()
			defer sub.release(1)
			defer r.cancel()
			sub.settle(ctx, r.msg, r.d, nil, nil)
		}()
	}
}

// startExtension extends the visibility of a message just handed out if it was taken late
// (see lateHandOff), or marks it as needing none.
func (sub *subscription) startExtension(ctx context.Context, d *delivery) {
	if late := time.Since(d.hiddenAt(sub.a.cfg.VisibilityTimeout)); late > lateHandOff {
		go sub.extend(ctx, d, late)
	} else {
		close(d.extended)
	}
}

// lateHandOff is how long after its receive (or its last visibility change) a message may be
// taken by the consumer before its visibility is extended. Watermill's router takes every
// message at once (it runs a handler per message); a consumer that reads the channel one
// message at a time takes the later messages of a batch only when it is done with the earlier
// ones, while their visibility timeout runs. So a message waiting for its hand-off is kept
// hidden (hidden again for VisibilityTimeout each time half of it has passed), and a message
// taken late is hidden for VisibilityTimeout from its hand-off, so that its handler still has
// ProcessingBudget and the margin before SQS hands it out again.
const lateHandOff = MinVisibilityMargin / 4

// extend hides a message handed out late for another VisibilityTimeout from now, then releases
// its own visibility changes (ScheduleRetry, the redrive hand-over), which wait for it.
func (sub *subscription) extend(ctx context.Context, d *delivery, late time.Duration) {
	defer close(d.extended)
	if err := sub.hide(ctx, d); err != nil {
		sub.a.cfg.Logger.WarnContext(ctx, "millrace sqs: cannot extend the visibility of a message the consumer took late; SQS may deliver it again while it is handled",
			"queue", d.queueURL, "message_id", d.messageID, "taken_after", late, "error", err)
	}
}

// hide hides d's message for VisibilityTimeout from now (no further than SQS allows, 12 h from
// the receive) and records until when.
func (sub *subscription) hide(ctx context.Context, d *delivery) error {
	now := time.Now()
	secs := visibilitySeconds(sub.a.cfg.VisibilityTimeout, now.Sub(d.receivedAt))
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sub.a.cfg.ownCallTimeout())
	defer cancel()
	if err := sub.visibility.do(callCtx, d.receipt, secs); err != nil {
		return err
	}
	d.hiddenUntil.Store(now.Add(time.Duration(secs) * time.Second).UnixNano())
	return nil
}

// keepHidden hides the messages still waiting for their hand-off again (one batch call).
func (sub *subscription) keepHidden(ctx context.Context, waiting []waitingMsg) {
	var wg sync.WaitGroup
	for _, r := range waiting {
		wg.Go(func() {
			if err := sub.hide(ctx, r.d); err != nil {
				sub.a.cfg.Logger.WarnContext(ctx, "millrace sqs: cannot keep a message waiting for the consumer hidden; SQS may deliver it again",
					"queue", r.d.queueURL, "message_id", r.d.messageID, "error", err)
			}
		})
	}
	wg.Wait()
}

// handOff offers waiting[0] to the consumer, keeping every waiting message hidden meanwhile;
// once ctx has ended, only until *handOffEnd (set to HandOffWait from the first message that
// finds ctx ended).
func (sub *subscription) handOff(ctx context.Context, waiting []waitingMsg, handOffEnd *time.Time) bool {
	msg, d := waiting[0].msg, waiting[0].d
	vt := sub.a.cfg.VisibilityTimeout
	if ctx.Err() == nil {
		select { // the usual case: the router takes it at once
		case sub.out <- msg:
			return true
		default:
		}
		refresh := time.NewTimer(d.nextRefresh(vt))
		defer refresh.Stop()
	wait:
		for {
			select {
			case sub.out <- msg:
				return true
			case <-refresh.C:
				sub.keepHidden(ctx, waiting)
				refresh.Reset(d.nextRefresh(vt))
			case <-ctx.Done():
				break wait
			}
		}
	}
	if handOffEnd.IsZero() {
		*handOffEnd = time.Now().Add(HandOffWait)
	}
	end := time.NewTimer(time.Until(*handOffEnd))
	defer end.Stop()
	select {
	case sub.out <- msg:
		return true
	case <-end.C:
		return false
	}
}

// settle relays the verdict of a message handed out; a message the consumer took keeps its
// verdict relayed until its visibility timeout ends, after which SQS hands it out again anyway.
// Meanwhile the later messages of its group, waiting (FIFO queues: see deliverGroups), are kept
// hidden, until the message's own invisibility ends without a verdict: release then gives them
// back, so that SQS can hand out the group again, in order. It reports whether the message is
// done with, so that the next of its group may be handled: acked and deleted (or left to the
// RedrivePolicy).
func (sub *subscription) settle(ctx context.Context, msg *message.Message, d *delivery, waiting []waitingMsg, release func()) bool {
	vt := sub.a.cfg.VisibilityTimeout
	var refresh, expiry <-chan time.Time
	var keep *time.Timer
	if len(waiting) > 0 {
		keep = time.NewTimer(waiting[0].d.nextRefresh(vt))
		defer keep.Stop()
		refresh = keep.C
	}
	ending := ctx.Done()
	for {
		select {
		case <-msg.Acked():
			return sub.acked(ctx, d)
		case <-msg.Nacked():
			return false
		case <-refresh:
			if time.Now().UnixNano() >= d.hiddenUntil.Load() { // SQS may hand the message out again
				release()
				refresh = nil
				continue
			}
			sub.keepHidden(ctx, waiting)
			keep.Reset(waiting[0].d.nextRefresh(vt))
		case <-ending:
			// Ending while the handler runs: wait for its verdict while the message is still ours.
			ending = nil
			d.waitExtension()
			t := time.NewTimer(time.Until(time.Unix(0, d.hiddenUntil.Load())))
			defer t.Stop()
			expiry = t.C
		case <-expiry:
			sub.a.cfg.Logger.WarnContext(ctx, "millrace sqs: subscription ended with a handler still running past the message's visibility timeout; SQS delivers the message again",
				"queue", d.queueURL, "message_id", d.messageID)
			return false
		}
	}
}

// acked deletes an acked message, unless it was left to SQS's RedrivePolicy, and reports
// whether the message is gone (or left to the RedrivePolicy).
func (sub *subscription) acked(ctx context.Context, d *delivery) bool {
	if d.leftToRedrive.Load() {
		return true
	}
	return sub.remove(ctx, d)
}

// giveBack makes a message the consumer did not take visible again at once. SQS has counted
// its receive all the same.
func (sub *subscription) giveBack(ctx context.Context, receipt *string, messageID string) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sub.a.cfg.ownCallTimeout())
	defer cancel()
	sub.a.givenBack.add(messageID) // before SQS can hand it out again (to another poller)
	if err := sub.visibility.do(callCtx, aws.ToString(receipt), 0); err != nil {
		sub.a.givenBack.undo(messageID)
		sub.a.cfg.Logger.WarnContext(ctx, "millrace sqs: cannot give back a message nobody took; it returns after its visibility timeout",
			"queue", sub.url, "message_id", messageID, "error", err)
	}
}

// remove deletes an acked message, in a DeleteMessageBatch with the acks of the same moment.
// Close does not cancel the delete, so an ack given before Close is not lost; a message
// already deleted counts as deleted. The message's slot in the Window is freed only after SQS
// answered.
func (sub *subscription) remove(ctx context.Context, d *delivery) bool {
	d.waitExtension()
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sub.a.cfg.ownCallTimeout())
	defer cancel()
	err := sub.deletes.do(callCtx, d.receipt, 0)
	if err == nil || alreadyDeleted(err) {
		sub.a.givenBack.forget(d.messageID)
		return true
	}
	sub.a.cfg.Logger.ErrorContext(ctx, "millrace sqs: cannot delete an acked message; it is delivered again after its visibility timeout",
		"queue", d.queueURL, "message_id", d.messageID, "error", err)
	return false
}

// Close ends the subscriptions made through s; a second Close waits as well. It waits for each
// one's receives in flight (at most Config.WaitTime + CallTimeout), hands the messages they got
// to the consumer as ordinary deliveries (given back if not taken within HandOffWait), and waits
// for the verdict of every message handed out, at most until the message's visibility timeout
// ends, and for the delete after an ack. So Close takes at most WaitTime + CallTimeout (the
// receives), HandOffWait, and then the handling of the messages each subscription holds (at
// most Config.Window, in parallel), up to Config.VisibilityTimeout, plus 2*CallTimeout for
// their deletes. The queue's
// own visibility timeout must be Config.VisibilityTimeout (it is when the adapter created the
// queue) for that wait to end when SQS would redeliver.
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
