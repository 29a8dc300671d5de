package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// batchWindow is how long a batch waits for more entries after its first one before it is
// sent; a batch of MaxReceiveBatch entries is sent at once.
const batchWindow = 2 * time.Millisecond

// notInQueue is SQS's message for a receipt handle whose message is already gone (deleted by an
// earlier ack that SQS applied though its answer was lost): watermill-aws's rule, kept.
const notInQueue = "The specified queue does not contain the message specified."

// batchEntry is one delete or visibility change waiting in a batcher. done receives exactly
// one result: nil only when SQS listed the entry as successful.
type batchEntry struct {
	receipt string
	secs    int32 // the visibility timeout to set (visibility changes only)
	done    chan error
}

// batcher coalesces the deletes (or the visibility changes) of one queue into batch calls: the
// entries that arrive within batchWindow of a batch's first entry, up to MaxReceiveBatch, go in
// one call. send runs in a goroutine of its own and reports each entry's result.
type batcher struct {
	send func([]*batchEntry)

	mu      sync.Mutex
	pending []*batchEntry
	timer   *time.Timer
}

// do adds an entry and waits for its result or for ctx to end (the call then still runs, and
// may take effect: the caller must treat a ctx error as "unknown", never as success).
func (b *batcher) do(ctx context.Context, receipt string, secs int32) error {
	e := &batchEntry{receipt: receipt, secs: secs, done: make(chan error, 1)}
	b.add(e)
	select {
	case err := <-e.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *batcher) add(e *batchEntry) {
	b.mu.Lock()
	b.pending = append(b.pending, e)
	switch len(b.pending) {
	case MaxReceiveBatch:
		batch := b.pending
		b.pending = nil
		if b.timer != nil {
			b.timer.Stop() // a timer that already fired finds the next batch: sent early, no harm
			b.timer = nil
		}
		b.mu.Unlock()
		go b.send(batch)
		return
	case 1:
		b.timer = time.AfterFunc(batchWindow, b.fire)
	}
	b.mu.Unlock()
}

func (b *batcher) fire() {
	b.mu.Lock()
	batch := b.pending
	b.pending = nil
	b.timer = nil
	b.mu.Unlock()
	if len(batch) > 0 {
		b.send(batch)
	}
}

// batchResults hands every entry of batch its result: the whole call's error, else the entry's
// failure, else nil for an entry SQS listed as successful. An entry SQS listed in neither gets an
// error: a delete or a retry write is never reported done unless SQS said so.
func batchResults(batch []*batchEntry, err error, successful []string, failed []types.BatchResultErrorEntry) {
	results := make([]error, len(batch))
	seen := make([]bool, len(batch))
	if err == nil {
		for _, id := range successful {
			if i, ok := batchIndex(id, len(batch)); ok {
				seen[i] = true
			}
		}
		for _, f := range failed {
			if i, ok := batchIndex(aws.ToString(f.Id), len(batch)); ok {
				seen[i] = true
				results[i] = &batchEntryError{code: aws.ToString(f.Code), message: aws.ToString(f.Message), senderFault: f.SenderFault}
			}
		}
	}
	for i, e := range batch {
		switch {
		case err != nil:
			results[i] = err
		case !seen[i]:
			results[i] = errors.New("millrace sqs: SQS did not report on this entry of the batch")
		}
		e.done <- results[i]
	}
}

func batchIndex(id string, n int) (int, bool) {
	i, err := strconv.Atoi(id)
	return i, err == nil && i >= 0 && i < n
}

// batchEntryError is SQS's failure of one entry of a batch call.
type batchEntryError struct {
	code, message string
	senderFault   bool
}

func (e *batchEntryError) Error() string {
	return fmt.Sprintf("millrace sqs: batch entry failed: %s: %s (sender fault %t)", e.code, e.message, e.senderFault)
}

// alreadyDeleted reports whether err says the message is no longer in the queue.
func alreadyDeleted(err error) bool {
	if be, ok := errors.AsType[*batchEntryError](err); ok {
		return be.message == notInQueue
	}
	var apiErr interface{ ErrorMessage() string }
	return errors.As(err, &apiErr) && apiErr.ErrorMessage() == notInQueue
}

// newDeleteBatcher returns the batcher of queueURL's deletes.
func newDeleteBatcher(a *Adapter, queueURL string) *batcher {
	return &batcher{send: func(batch []*batchEntry) {
		entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
		for i, e := range batch {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(e.receipt)}
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ownCallTimeout())
		defer cancel()
		out, err := a.client.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: entries})
		var ok []string
		var failed []types.BatchResultErrorEntry
		if err == nil {
			for _, s := range out.Successful {
				ok = append(ok, aws.ToString(s.Id))
			}
			failed = out.Failed
		}
		batchResults(batch, err, ok, failed)
	}}
}

// newVisibilityBatcher returns the batcher of queueURL's visibility changes.
func newVisibilityBatcher(a *Adapter, queueURL string) *batcher {
	return &batcher{send: func(batch []*batchEntry) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
		for i, e := range batch {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(e.receipt), VisibilityTimeout: e.secs,
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ownCallTimeout())
		defer cancel()
		out, err := a.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(queueURL), Entries: entries})
		var ok []string
		var failed []types.BatchResultErrorEntry
		if err == nil {
			for _, s := range out.Successful {
				ok = append(ok, aws.ToString(s.Id))
			}
			failed = out.Failed
		}
		batchResults(batch, err, ok, failed)
	}}
}
