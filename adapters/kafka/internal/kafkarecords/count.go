// Package kafkarecords counts what a read_committed Kafka consumer would get from a range of
// offsets, from raw fetches. Kafka ends every transaction with a marker that no consumer
// receives, so a reader that stops at a partition's end offset waits for ever on a partition
// written in transactions, and one that stops after a quiet spell guesses; Count does not.
package kafkarecords

import (
	"fmt"

	"github.com/IBM/sarama"
)

// Count counts the records a read_committed consumer gets in [from, end) of a
// partition, from raw fetches: data batches count, unless an aborted transaction wrote them;
// control batches (the commit and abort markers that end every transaction) do not. A
// consumer never receives a marker, so a consumer-based count can only guess that the offsets
// left after its last record are markers from a quiet spell, which a slow fetch on a loaded
// machine turns into a false "nothing pending"; this count does not guess.
func Count(client sarama.Client, topic string, p int32, from, end int64) (int, error) {
	if from >= end {
		return 0, nil
	}
	leader, err := client.Leader(topic, p)
	if err != nil {
		return 0, err
	}
	n, next, err := Scan(leader, topic, p, from, end, -1, 8<<20)
	if err != nil {
		return 0, err
	}
	if next < end {
		// Nothing stable past next: a transaction is still open there, which is not settled
		// either.
		return int(n) + 1, nil
	}
	return int(n), nil
}

// Scan counts, like Count, the records a read_committed consumer gets in [from, next) of a
// partition through its leader, in at most fetches fetch requests (negative: no limit) of at
// most maxBytes each (the broker returns a first batch larger than that whole). next is end
// when the whole range was counted; it is less when the fetches ran out, or when the rest of
// the range is not stable yet (a transaction still open at next).
func Scan(leader *sarama.Broker, topic string, p int32, from, end int64, fetches int, maxBytes int32) (n, next int64, err error) {
	aborted := map[int64]bool{} // producer ids inside an aborted transaction at the current offset
	offset := from
	for ; offset < end && fetches != 0; fetches-- {
		// read_committed: batches up to the last stable offset, with the aborted transactions
		// among them listed. Version 4 (Kafka 0.11, the first with transactions) is enough.
		req := &sarama.FetchRequest{Version: 4, MaxWaitTime: 0, MinBytes: 0, MaxBytes: maxBytes, Isolation: sarama.ReadCommitted}
		req.AddBlock(topic, p, offset, maxBytes, -1)
		resp, err := leader.Fetch(req)
		if err != nil {
			return 0, from, err
		}
		block := resp.GetBlock(topic, p)
		if block == nil || block.Err != sarama.ErrNoError {
			if block != nil {
				return 0, from, fmt.Errorf("fetch %s/%d@%d: %w", topic, p, offset, block.Err)
			}
			return 0, from, fmt.Errorf("fetch %s/%d@%d: no block in the response", topic, p, offset)
		}
		abortedAt := map[int64]int64{} // producer id -> first offset of its aborted transaction
		for _, a := range block.AbortedTransactions {
			abortedAt[a.ProducerID] = a.FirstOffset
		}
		advanced := false
		for _, rs := range block.RecordsSet {
			b := rs.RecordBatch
			if b == nil {
				continue
			}
			last := b.FirstOffset + int64(b.LastOffsetDelta)
			if last < offset {
				continue
			}
			if b.PartialTrailingRecord {
				break // cut off by maxBytes: the next fetch starts at it
			}
			if first, ok := abortedAt[b.ProducerID]; ok && b.IsTransactional && first <= last {
				aborted[b.ProducerID] = true
			}
			switch {
			case b.Control:
				delete(aborted, b.ProducerID) // the marker ends the producer's transaction
			case b.IsTransactional && aborted[b.ProducerID]:
			default:
				for _, r := range b.Records {
					if o := b.FirstOffset + r.OffsetDelta; o >= offset && o < end {
						n++
					}
				}
			}
			offset, advanced = min(last+1, end), true
		}
		if !advanced {
			break
		}
	}
	return n, offset, nil
}
