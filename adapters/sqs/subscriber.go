package sqs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
// only its own subscriptions. Each subscription receives one message at a time with a long
// poll of Config.WaitTime, asking SQS for ApproximateReceiveCount and
// ApproximateFirstReceiveTimestamp, which DecodeAttempt reads.
//
// Ending a subscription (Close, or its Subscribe context) never burns an attempt: SQS counts a
// receive as soon as it hands a message out, cancelled request or not, so the receive in
// flight is not cancelled but left to finish (at most Config.WaitTime + CallTimeout), and the message it got is handed to the consumer as an ordinary
// delivery, whose verdict counts as usual. Only a message the consumer does not take within
// HandOffWait (1 s) is given back (ChangeMessageVisibility 0); SQS has then counted a receive
// that no handler saw. A subscription ending does not cancel the handler contexts; a context
// ends with its delivery: after the verdict, or when the message's visibility timeout runs out
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

// subscriber runs one receive loop per Subscribe call over the adapter's SQS client, so that
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
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer stop()
		s.receive(subCtx, topic, url, out)
	}()
	return out, nil
}

// receive polls url until ctx ends. A poll is never cancelled: it runs to its end, and what it
// received after ctx ended is delivered all the same (see deliver).
func (s *subscriber) receive(ctx context.Context, topic, url string, out chan<- *message.Message) {
	a := s.a
	input := &awssqs.ReceiveMessageInput{
		QueueUrl:              aws.String(url),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
		},
		WaitTimeSeconds:     int32(a.cfg.WaitTime / time.Second),
		MaxNumberOfMessages: 1, // one in flight: the others stay receivable by other consumers
	}
	for ctx.Err() == nil {
		pollCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.receiveTimeout())
		res, err := a.client.ReceiveMessage(pollCtx, input, longerRequests(a.cfg.receiveTimeout()))
		timedOut := errors.Is(pollCtx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil {
			if timedOut {
				err = fmt.Errorf("no answer within WaitTime + CallTimeout (%s): %w", a.cfg.receiveTimeout(), err)
			}
			a.cfg.Logger.ErrorContext(ctx, "millrace sqs: cannot receive messages", "queue", url, "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(receiveRetrySleep):
			}
			continue
		}
		for i := range res.Messages {
			s.deliver(ctx, topic, url, &res.Messages[i], out)
		}
	}
}

// deliver hands one received message to the consumer and relays its verdict. Once ctx has
// ended (the subscription is ending) the message is still offered for HandOffWait, then given
// back if the consumer did not take it; a message the consumer took keeps its verdict relayed
// until its visibility timeout ends, after which SQS hands it out again anyway.
func (s *subscriber) deliver(ctx context.Context, topic, url string, sm *types.Message, out chan<- *message.Message) {
	msg, d := decodeMessage(sm)
	d.topic, d.queueURL = topic, url
	// The handler's context is not cancelled when the subscription ends: a handler running then
	// finishes and its verdict counts. It ends when deliver returns.
	msgCtx, cancel := context.WithCancel(withDelivery(context.WithoutCancel(ctx), d))
	defer cancel()
	if d.decodeErr != nil {
		msgCtx = millrace.WithDecodeError(msgCtx, d.decodeErr)
	}
	msg.SetContext(msgCtx)

	select {
	case out <- msg:
	case <-ctx.Done():
		handOff := time.NewTimer(HandOffWait)
		defer handOff.Stop()
		select {
		case out <- msg:
		case <-handOff.C:
			s.giveBack(ctx, d)
			return
		}
	}
	select {
	case <-msg.Acked():
		s.acked(ctx, d)
		return
	case <-msg.Nacked():
		return
	case <-ctx.Done():
	}
	// Ending while the handler runs: wait for its verdict while the message is still ours.
	expiry := time.NewTimer(time.Until(d.receivedAt.Add(s.a.cfg.VisibilityTimeout)))
	defer expiry.Stop()
	select {
	case <-msg.Acked():
		s.acked(ctx, d)
	case <-msg.Nacked():
	case <-expiry.C:
		s.a.cfg.Logger.WarnContext(ctx, "millrace sqs: subscription ended with a handler still running past the message's visibility timeout; SQS delivers the message again",
			"queue", d.queueURL, "message_id", d.messageID)
	}
}

// acked deletes an acked message, unless it was left to SQS's RedrivePolicy.
func (s *subscriber) acked(ctx context.Context, d *delivery) {
	if !d.leftToRedrive.Load() {
		s.remove(ctx, d)
	}
}

// giveBack makes a message the consumer did not take visible again at once. SQS has counted
// its receive all the same.
func (s *subscriber) giveBack(ctx context.Context, d *delivery) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.a.cfg.ownCallTimeout())
	defer cancel()
	if _, err := s.a.client.ChangeMessageVisibility(callCtx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(d.queueURL),
		ReceiptHandle:     aws.String(d.receipt),
		VisibilityTimeout: 0,
	}); err != nil {
		s.a.cfg.Logger.WarnContext(ctx, "millrace sqs: cannot give back a message nobody took; it returns after its visibility timeout",
			"queue", d.queueURL, "message_id", d.messageID, "error", err)
	}
}

// remove deletes an acked message. Close does not cancel the delete, so an ack given before
// Close is not lost; a message already deleted counts as deleted.
func (s *subscriber) remove(ctx context.Context, d *delivery) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.a.cfg.ownCallTimeout())
	defer cancel()
	_, err := s.a.client.DeleteMessage(callCtx, &awssqs.DeleteMessageInput{
		QueueUrl:      aws.String(d.queueURL),
		ReceiptHandle: aws.String(d.receipt),
	})
	var apiErr interface{ ErrorMessage() string }
	if errors.As(err, &apiErr) && apiErr.ErrorMessage() == "The specified queue does not contain the message specified." {
		return // already deleted (watermill-aws's rule, kept)
	}
	if err != nil {
		s.a.cfg.Logger.ErrorContext(ctx, "millrace sqs: cannot delete an acked message; it is delivered again after its visibility timeout",
			"queue", d.queueURL, "message_id", d.messageID, "error", err)
	}
}

// Close ends the subscriptions made through s; a second Close waits as well. It waits for each
// one's receive in flight (at most Config.WaitTime + CallTimeout),
// hands the message it got to the consumer as an ordinary delivery (given back if not taken
// within HandOffWait), and waits for the verdict of every message handed out, at most until the
// message's visibility timeout ends, and for the delete after an ack. So Close takes at most
// WaitTime + CallTimeout (the receive), HandOffWait, and then the handling of one message per
// subscription, up to Config.VisibilityTimeout, plus 2*CallTimeout for its delete. The queue's
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
