package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/rcrowley/go-metrics"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
)

// TestURLDestinationsDepths: on a cluster of its own, DeadLetterDestinations gives every
// dead-letter topic the depth the store's Count gives it: empty topics (one with removal marks,
// one whose records were all deleted) 0 without being read, each costing no metadata request;
// and, read a few at a time, records less removed ones, committed transactions counted, an
// aborted one not (read_committed; the transaction markers are no records).
func TestURLDestinationsDepths(t *testing.T) {
	addr := securedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opened, err := brokerurl.OpenBroker(ctx, "kafka://"+addr, brokerurl.Options{NoConsume: true, Logger: urlTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	b := opened.(*urlBroker)
	admin, err := sarama.NewClusterAdminFromClient(b.client)
	if err != nil {
		t.Fatal(err)
	}
	create := func(topic string, partitions int32) {
		t.Helper()
		if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	}
	const empties = 20
	var want []brokerurl.Destination
	for i := range empties {
		n := fmt.Sprintf("empty%02d", i)
		create(n+DeadLetterSuffix, int32(1+i%3))
		want = append(want, brokerurl.Destination{Name: n + DeadLetterSuffix, Topic: n})
	}
	create("work", 1)                                 // not a destination
	create("work"+DeadLetterSuffix+".replayed", 1)    // a marker topic, not a destination
	put := func(topic string, n int) (ids []string) { // n dead letters, Put by the store
		t.Helper()
		s, err := b.DeadLetters(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i := range n {
			id, err := s.Put(ctx, storetest.Sample(i, topic, deadletter.Exhausted))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	remove := func(topic string, ids ...string) {
		t.Helper()
		s, err := b.DeadLetters(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, id := range ids {
			if err := s.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}

	// 5 dead letters on 3 partitions, 2 removed: 3.
	create("marked.dlq", 3)
	ids := put("marked.dlq", 5)
	remove("marked.dlq", ids[0], ids[3])
	// All removed: 0, read.
	create("gone.dlq", 1)
	remove("gone.dlq", put("gone.dlq", 2)...)
	// Transactions as the adapter writes dead letters: 2 committed, 1 aborted: 2.
	create("txn.dlq", 2)
	txn := txnProducer(t, addr, "txn")
	txn.send(t, "txn.dlq", true, 2)
	txn.send(t, "txn.dlq", false, 1)
	// Only an aborted transaction: offsets but no record, 0.
	create("aborted.dlq", 1)
	txnProducer(t, addr, "aborted").send(t, "aborted.dlq", false, 3)
	// Empty, with a mark in its marker topic (of a record gone since): 0.
	create("emptymarked.dlq", 1)
	create("emptymarked.dlq.replayed", 1)
	plain, err := sarama.NewSyncProducerFromClient(b.client)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, _, err := plain.SendMessage(&sarama.ProducerMessage{Topic: "emptymarked.dlq.replayed", Key: sarama.StringEncoder("0@0"), Value: sarama.StringEncoder("x")}); err != nil {
		t.Fatal(err)
	}
	// Records deleted below the end (as retention does): first offset = end offset, 0.
	create("trimmed.dlq", 1)
	put("trimmed.dlq", 2)
	if err := admin.DeleteRecords("trimmed.dlq", map[int32]int64{0: 2}); err != nil {
		t.Fatalf("delete the records of trimmed.dlq: %v", err)
	}
	skipped := empties + 2 // the empty topics, emptymarked and trimmed
	want = append(want,
		brokerurl.Destination{Name: "aborted.dlq", Topic: "aborted"},
		brokerurl.Destination{Name: "emptymarked.dlq", Topic: "emptymarked"},
		brokerurl.Destination{Name: "gone.dlq", Topic: "gone"},
		brokerurl.Destination{Name: "marked.dlq", Topic: "marked", Depth: 3},
		brokerurl.Destination{Name: "trimmed.dlq", Topic: "trimmed"},
		brokerurl.Destination{Name: "txn.dlq", Topic: "txn", Depth: 2},
	)
	slices.SortFunc(want, func(x, y brokerurl.Destination) int { return strings.Compare(x.Name, y.Name) })

	meter, _ := b.client.Config().MetricRegistry.GetOrRegister("protocol-requests-rate-3", metrics.NewMeter).(metrics.Meter)
	if meter == nil {
		t.Fatal("the operations client records no metadata request count")
	}
	before := meter.Count()
	start := time.Now()
	got, err := b.DeadLetterDestinations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	elapsed, metadata := time.Since(start), meter.Count()-before
	t.Logf("%d destinations in %v, %d metadata requests", len(got), elapsed.Round(time.Millisecond), metadata)
	if !slices.Equal(got, want) {
		t.Fatalf("destinations\n%+v\nwant\n%+v", got, want)
	}
	// The store agrees on every depth.
	for _, d := range got {
		s, err := b.DeadLetters(ctx, d.Name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.Count(ctx, deadletter.Filter{})
		_ = s.Close()
		if err != nil || n != d.Depth {
			t.Errorf("%s: depth %d, the store's Count %d (%v)", d.Name, d.Depth, n, err)
		}
	}
	// A store opened per empty topic refreshes the metadata at least once.
	if metadata >= int64(skipped) {
		t.Errorf("DeadLetterDestinations made %d metadata requests for %d topics, %d of them empty: the empty ones were opened as stores", metadata, len(got), skipped)
	}

	// Ended context: an error, not a partial list.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if got, err := b.DeadLetterDestinations(cctx); err == nil {
		t.Errorf("cancelled context: %v, no error", got)
	}
}

// testTxnProducer writes records in transactions, as the adapter writes dead letters.
type testTxnProducer struct{ sarama.SyncProducer }

func txnProducer(t *testing.T, addr, id string) testTxnProducer {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_5_0_0
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Transaction.ID = "destinations-test-" + id
	sc.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{addr}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return testTxnProducer{p}
}

// send writes n records to topic in one transaction, committed or aborted.
func (p testTxnProducer) send(t *testing.T, topic string, commit bool, n int) {
	t.Helper()
	if err := p.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprint("record ", i))}); err != nil {
			t.Fatal(err)
		}
	}
	end := p.CommitTxn
	if !commit {
		end = p.AbortTxn
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
}
