package kafka_test

import (
	"fmt"
	"testing"

	"github.com/IBM/sarama"
)

// committedRecords counts the records a read_committed consumer gets in [from, end) of a
// partition, from raw fetches: data batches count, unless an aborted transaction wrote them;
// control batches (the commit and abort markers that end every transaction) do not. A
// consumer never receives a marker, so a consumer-based count can only guess that the offsets
// left after its last record are markers from a quiet spell, which a slow fetch on a loaded
// machine turns into a false "nothing pending"; this count does not guess.
func committedRecords(brokers []string, topic string, p int32, from, end int64) (int, error) {
	if from >= end {
		return 0, nil
	}
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	leader, err := client.Leader(topic, p)
	if err != nil {
		return 0, err
	}
	n := 0
	aborted := map[int64]bool{} // producer ids inside an aborted transaction at the current offset
	for offset := from; offset < end; {
		// read_committed: batches up to the last stable offset, with the aborted transactions
		// among them listed.
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 0, MinBytes: 0, MaxBytes: 8 << 20, Isolation: sarama.ReadCommitted}
		req.AddBlock(topic, p, offset, 8<<20, -1)
		resp, err := leader.Fetch(req)
		if err != nil {
			return 0, err
		}
		block := resp.GetBlock(topic, p)
		if block == nil || block.Err != sarama.ErrNoError {
			return 0, fmt.Errorf("fetch %s/%d@%d: %v", topic, p, offset, block)
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
			offset, advanced = last+1, true
		}
		if !advanced {
			// Nothing stable past offset: a transaction is still open there, which is not
			// settled either.
			return n + 1, nil
		}
	}
	return n, nil
}

// committedRecords counts what a read_committed consumer gets: a plain record, a committed
// transaction's record, not an aborted one's nor the markers, and an open transaction as
// unsettled.
func TestCommittedRecordsCounts(t *testing.T) {
	t.Parallel()
	list := brokers(t)
	topic := uniqueName("records")
	if err := admin(t).CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: -1}, false); err != nil {
		t.Fatal(err)
	}
	plain, err := sarama.NewSyncProducer(list, foreignSaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	tc := foreignSaramaConfig()
	tc.Version = sarama.V2_8_0_0
	tc.Producer.Idempotent, tc.Net.MaxOpenRequests, tc.Producer.Retry.Max = true, 1, 3
	tc.Producer.Transaction.ID = topic + "-txn"
	txn, err := sarama.NewSyncProducer(list, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	send := func(p sarama.SyncProducer, v string) {
		t.Helper()
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatal(err)
		}
	}
	end := func() int64 {
		c, err := sarama.NewClient(list, sarama.NewConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		e, err := c.GetOffset(topic, 0, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	count := func() int {
		t.Helper()
		n, err := committedRecords(list, topic, 0, 0, end())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	send(plain, "plain")
	for _, commit := range []bool{true, false} {
		if err := txn.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		send(txn, "in a transaction")
		send(txn, "in a transaction")
		if commit {
			err = txn.CommitTxn()
		} else {
			err = txn.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 3 {
		t.Fatalf("counted %d records, want 3: the plain one and the committed transaction's two", n)
	}
	if err := txn.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	send(txn, "open")
	if n := count(); n != 4 {
		t.Fatalf("with a transaction open: counted %d, want 3 and 1 for the open transaction", n)
	}
	_ = txn.AbortTxn()
}
