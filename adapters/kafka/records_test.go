package kafka_test

import (
	"testing"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace/adapters/kafka/internal/kafkarecords"
)

// committedRecords counts what a read_committed reader gets in [from, end) of a partition
// (kafkarecords.Count) over a client of its own.
func committedRecords(brokers []string, topic string, p int32, from, end int64) (int, error) {
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	return kafkarecords.Count(client, topic, p, from, end)
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
