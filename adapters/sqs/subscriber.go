package sqs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
)

const (
	// pollSlack is how long a receive may run past Config.WaitTime before it is given up: it
	// bounds Close when the endpoint does not answer.
	pollSlack = 10 * time.Second
	// callTimeout bounds the delete after an ack and the give-back at Close, which Close does
	// not cancel.
	callTimeout = 10 * time.Second
	// receiveRetrySleep is the pause after a failed receive.
	receiveRetrySleep = time.Second
)

// Subscriber returns a new subscriber. Closing it (the Watermill router does on shutdown) ends
// only its own subscriptions. Each subscription receives one message at a time with a long
// poll of Config.WaitTime, asking SQS for ApproximateReceiveCount and
// ApproximateFirstReceiveTimestamp, which DecodeAttempt reads.
//
// Close never cancels a receive in flight (SQS may already have handed out a message to a
// cancelled request, counting the receive and hiding the message for the visibility timeout):
// it waits for the poll to end, which takes at most Config.WaitTime (plus 10 s if the endpoint
// does not answer), and gives back (ChangeMessageVisibility 0) every message received but not
// yet handed to the consumer, so it is receivable again at once.
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
// subscription ends when ctx ends or the subscriber is closed, as Close describes.
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

	// subCtx ends with ctx or at Close; handlers' message contexts derive from it.
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
// received after ctx ended is given back.
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
		pollCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.WaitTime+pollSlack)
		res, err := a.client.ReceiveMessage(pollCtx, input)
		cancel()
		if err != nil {
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

// deliver hands one received message to the consumer and relays its verdict. If the
// subscription ends before the consumer takes the message, the message is given back; if it
// ends while the handler runs, the message is left to its visibility timeout (the handler may
// still be working on it).
func (s *subscriber) deliver(ctx context.Context, topic, url string, sm *types.Message, out chan<- *message.Message) {
	msg, d := decodeMessage(sm)
	d.topic, d.queueURL = topic, url
	if ctx.Err() != nil {
		s.giveBack(ctx, d)
		return
	}
	msgCtx, cancel := context.WithCancel(withDelivery(ctx, d))
	defer cancel()
	if d.decodeErr != nil {
		msgCtx = millrace.WithDecodeError(msgCtx, d.decodeErr)
	}
	msg.SetContext(msgCtx)

	select {
	case out <- msg:
	case <-ctx.Done():
		s.giveBack(ctx, d)
		return
	}
	select {
	case <-msg.Acked():
		if !d.leftToRedrive.Load() {
			s.remove(ctx, d)
		}
	case <-msg.Nacked():
	case <-ctx.Done():
	}
}

// giveBack makes a message the consumer never got visible again at once. SQS has counted its
// receive all the same.
func (s *subscriber) giveBack(ctx context.Context, d *delivery) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	if _, err := s.a.client.ChangeMessageVisibility(callCtx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(d.queueURL),
		ReceiptHandle:     aws.String(d.receipt),
		VisibilityTimeout: 0,
	}); err != nil {
		s.a.cfg.Logger.WarnContext(ctx, "millrace sqs: cannot give back a message received at close; it returns after its visibility timeout",
			"queue", d.queueURL, "message_id", d.messageID, "error", err)
	}
}

// remove deletes an acked message. Close does not cancel the delete, so an ack given before
// Close is not lost; a message already deleted counts as deleted.
func (s *subscriber) remove(ctx context.Context, d *delivery) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
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

// Close ends the subscriptions made through s, waiting for each one's receive in flight (at
// most Config.WaitTime, plus 10 s if the endpoint does not answer); a second Close waits as
// well. Messages received but not yet handed to the consumer are given back (visible again at
// once); messages whose handler is still running are left to their visibility timeout.
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
