package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
)

var _ millrace.BacklogReporter = (*Adapter)(nil)

// Backlog reports topic's queues with one GetQueueAttributes per queue (the work queue and its
// dead-letter queue, both at once), within ctx. SQS's counts are approximate (eventually
// consistent: they may lag a send, a receive or a delete by a minute on AWS):
//
//   - Waiting: the work queue's ApproximateNumberOfMessages, the messages visible now, which
//     the next receive may get. A message whose retry delay or visibility timeout has just run
//     out counts here again; under GiveUpRedrive, so does an exhausted message waiting for the
//     receive that lets the RedrivePolicy move it.
//   - InFlight: the work queue's ApproximateNumberOfMessagesNotVisible, the messages received
//     and neither deleted nor visible again: those a handler holds, those waiting in a
//     subscription's Window, and the scheduled retries (ScheduleRetry hides the original).
//   - RetriesWaiting: Unknown. A retry is a visibility change of the original message, so SQS
//     counts it with the messages in flight and cannot tell them apart (the adapter sends no
//     delayed copies, so ApproximateNumberOfMessagesDelayed is not it).
//   - DeadLetters: the dead-letter queue's (topic + Config.DeadLetterSuffix)
//     ApproximateNumberOfMessages. A dead letter a tool holds received (a DeadLetterStore
//     listing it) is not counted until it is visible again.
//
// A queue that does not exist is an error wrapping ErrQueueMissing; a count SQS does not send,
// or sends as something other than a non-negative integer, is Unknown. After Close it returns
// millrace.ErrClosed.
func (a *Adapter) Backlog(ctx context.Context, topic string) (millrace.Backlog, error) {
	if err := ctx.Err(); err != nil {
		return millrace.Backlog{}, fmt.Errorf("millrace sqs: backlog of %q: %w", topic, err)
	}
	if a.isClosed() {
		return millrace.Backlog{}, millrace.ErrClosed
	}
	type reading struct {
		attrs map[string]string
		err   error
	}
	read := func(t string, names ...types.QueueAttributeName) <-chan reading {
		done := make(chan reading, 1)
		go func() {
			url, err := a.urls.url(ctx, t)
			if err != nil {
				done <- reading{err: err}
				return
			}
			out, err := a.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
			var missing *types.QueueDoesNotExist
			if errors.As(err, &missing) {
				// Deleted since its URL was cached: forget the URL, so that a queue created
				// again under the name is found, and say it is missing.
				a.urls.forget(a.QueueName(t))
				done <- reading{err: fmt.Errorf("%w: %s (topic %q): %w", ErrQueueMissing, a.QueueName(t), t, err)}
				return
			}
			if err != nil {
				done <- reading{err: fmt.Errorf("millrace sqs: get attributes of queue %s: %w", a.QueueName(t), err)}
				return
			}
			done <- reading{attrs: out.Attributes}
		}()
		return done
	}
	work := read(topic, types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
	dlq := read(a.DeadLetterTopic(topic), types.QueueAttributeNameApproximateNumberOfMessages)
	w, d := <-work, <-dlq
	for _, err := range []error{w.err, d.err} {
		if err != nil {
			return millrace.Backlog{}, fmt.Errorf("millrace sqs: backlog of %q: %w", topic, err)
		}
	}
	return millrace.Backlog{
		Waiting:        queueCount(w.attrs, types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight:       queueCount(w.attrs, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		RetriesWaiting: millrace.Unknown,
		DeadLetters:    queueCount(d.attrs, types.QueueAttributeNameApproximateNumberOfMessages),
	}, nil
}

// queueCount reads a count attribute SQS sent: Unknown when it is missing or not a non-negative
// integer.
func queueCount(attrs map[string]string, name types.QueueAttributeName) int64 {
	v, ok := attrs[string(name)]
	if !ok {
		return millrace.Unknown
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return millrace.Unknown
	}
	return n
}
