package sqs

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func entries(n int) []*batchEntry {
	batch := make([]*batchEntry, n)
	for i := range batch {
		batch[i] = &batchEntry{done: make(chan error, 1)}
	}
	return batch
}

func results(batch []*batchEntry) []error {
	errs := make([]error, len(batch))
	for i, e := range batch {
		select {
		case errs[i] = <-e.done:
		default:
			panic("an entry got no result")
		}
		select {
		case <-e.done:
			panic("an entry got two results")
		default:
		}
	}
	return errs
}

// TestBatchResultsPerEntry: each entry gets its own result, nil only where SQS listed it as
// successful; an entry SQS left out, or listed under an unknown id, is a failure.
func TestBatchResultsPerEntry(t *testing.T) {
	batch := entries(5)
	batchResults(batch, nil, []string{"0", "3", "9", "x"}, []types.BatchResultErrorEntry{
		{Id: aws.String("1"), Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String(notInQueue), SenderFault: true},
		{Id: aws.String("2"), Code: aws.String("InternalError"), Message: aws.String("boom")},
	})
	errs := results(batch)
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("successful entries: %v, %v", errs[0], errs[3])
	}
	if !alreadyDeleted(errs[1]) {
		t.Fatalf("entry 1: %v, want the already-deleted failure", errs[1])
	}
	if errs[2] == nil || alreadyDeleted(errs[2]) {
		t.Fatalf("entry 2: %v, want its own failure", errs[2])
	}
	if errs[4] == nil {
		t.Fatal("entry 4, on which SQS did not report, counts as done")
	}
}

// TestBatchResultsFailureWins: an entry listed both as successful and as failed is failed.
func TestBatchResultsFailureWins(t *testing.T) {
	batch := entries(1)
	batchResults(batch, nil, []string{"0"}, []types.BatchResultErrorEntry{{Id: aws.String("0"), Code: aws.String("X"), Message: aws.String("y")}})
	if err := results(batch)[0]; err == nil {
		t.Fatal("an entry SQS also listed as failed counts as done")
	}
}

// TestBatchResultsCallError: a failed call fails every entry with its error.
func TestBatchResultsCallError(t *testing.T) {
	callErr := errors.New("connection reset")
	batch := entries(3)
	batchResults(batch, callErr, []string{"0", "1", "2"}, nil)
	for i, err := range results(batch) {
		if !errors.Is(err, callErr) {
			t.Fatalf("entry %d: %v, want the call's error", i, err)
		}
	}
}
