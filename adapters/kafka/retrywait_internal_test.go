package kafka

import (
	"testing"

	"github.com/IBM/sarama"
)

// The retry queue pauses its partition once it holds high records and resumes it once it is
// down to half, keeps the records in order, and does not grow past what it was given.
func TestRetryQueuePausesAtHighResumesAtLow(t *testing.T) {
	var calls []bool
	stats := &retryQueueStats{}
	q := newRetryQueue(8, func(pause bool) { calls = append(calls, pause) }, stats)
	var offset int64
	push := func(n int) {
		for range n {
			q.push(&sarama.ConsumerMessage{Offset: offset})
			offset++
		}
	}
	var next int64
	pop := func(n int) {
		t.Helper()
		for range n {
			rec := q.peek()
			if rec == nil || rec.Offset != next {
				t.Fatalf("peek = %v, want offset %d", rec, next)
			}
			q.pop()
			next++
		}
	}
	push(7)
	if len(calls) != 0 {
		t.Fatalf("paused below the high mark: %v", calls)
	}
	push(1)
	if len(calls) != 1 || !calls[0] {
		t.Fatalf("not paused at the high mark: %v", calls)
	}
	push(100) // what the fetch in flight still brings is queued, not refused
	if len(calls) != 1 {
		t.Fatalf("paused or resumed again while paused: %v", calls)
	}
	pop(100)
	if len(calls) != 1 {
		t.Fatalf("resumed above the low mark: %v", calls)
	}
	pop(4) // 4 left: the low mark
	if len(calls) != 2 || calls[1] {
		t.Fatalf("not resumed at the low mark: %v", calls)
	}
	if cap(q.recs) > 2*108 || len(q.recs)-q.head != 4 {
		t.Fatalf("queue holds %d records in a slice of %d", len(q.recs)-q.head, cap(q.recs))
	}
	pop(4)
	if q.peek() != nil {
		t.Fatal("records left in an emptied queue")
	}
	// A queue that is never empty still does not grow: popped records are moved out.
	push(1)
	for range 10000 {
		push(1)
		pop(1)
	}
	if cap(q.recs) > 2*108 {
		t.Fatalf("queue slice grew to %d", cap(q.recs))
	}
	for q.peek() != nil {
		pop(1)
	}
	push(8)
	q.close()
	if len(calls) != 4 || !calls[2] || calls[3] {
		t.Fatalf("close did not resume the paused partition: %v", calls)
	}
	if stats.maxQueued.Load() != 108 || stats.pauses.Load() != 2 {
		t.Fatalf("stats: maxQueued %d pauses %d, want 108 and 2", stats.maxQueued.Load(), stats.pauses.Load())
	}
}
