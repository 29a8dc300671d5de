package kafka_test

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
)

// The group's rebalance timeout outlasts a slow handler (the field report's 104 s budget), so
// a rebalance does not evict a member that is still working on a record; a value chosen in
// Config.Sarama is kept.
func TestRebalanceTimeoutOutlastsSlowHandlers(t *testing.T) {
	cfg := kafka.Config{Brokers: []string{"127.0.0.1:1"}, ConsumerGroup: "g"}
	if got := kafka.SaramaConfig(cfg).Consumer.Group.Rebalance.Timeout; got < 2*time.Minute {
		t.Fatalf("rebalance timeout %s, want at least 2m (handlers may take 104s)", got)
	}
	sc := sarama.NewConfig()
	sc.Consumer.Group.Rebalance.Timeout = 3 * time.Minute
	cfg.Sarama = sc
	if got := kafka.SaramaConfig(cfg).Consumer.Group.Rebalance.Timeout; got != 3*time.Minute {
		t.Fatalf("rebalance timeout %s, want the configured 3m", got)
	}
}

// Transactional mode (the default) refuses, at start-up and naming the field, what would
// break it: a Sarama version without generation-fenced transactional commits and stable
// offset fetches, a transactional id of the user's (the adapter names one per partition), a
// negative transaction timeout, white space in the id prefix. AtLeastOnce takes old versions.
// Every topic is read read_committed by default.
func TestTransactionalConfigValidated(t *testing.T) {
	old := sarama.NewConfig()
	old.Version = sarama.V2_4_0_0
	withID := sarama.NewConfig()
	withID.Producer.Transaction.ID = "mine"
	coop := sarama.NewConfig()
	coop.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	for _, c := range []struct {
		cfg   kafka.Config
		field string
	}{
		{kafka.Config{Sarama: old}, "kafka.Config.Sarama.Version"},
		{kafka.Config{Sarama: withID}, "kafka.Config.Sarama.Producer.Transaction.ID"},
		{kafka.Config{Sarama: withID, AtLeastOnce: true}, "kafka.Config.Sarama.Producer.Transaction.ID"},
		{kafka.Config{TransactionTimeout: -time.Second}, "kafka.Config.TransactionTimeout"},
		{kafka.Config{TransactionalIDPrefix: "my app"}, "kafka.Config.TransactionalIDPrefix"},
		{kafka.Config{Sarama: coop}, "kafka.Config.Sarama.Consumer.Group.Rebalance.GroupStrategies"},
		{kafka.Config{Sarama: coop, AtLeastOnce: true}, "kafka.Config.Sarama.Consumer.Group.Rebalance.GroupStrategies"},
	} {
		c.cfg.Brokers, c.cfg.ConsumerGroup = []string{"127.0.0.1:1"}, "g"
		err := c.cfg.Validate()
		var ce *millrace.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("Validate(%+v) = %v, want a ConfigError naming %s", c.cfg, err, c.field)
		}
	}
	ok := kafka.Config{Brokers: []string{"127.0.0.1:1"}, ConsumerGroup: "g", Sarama: old, AtLeastOnce: true}
	if err := ok.Validate(); err != nil {
		t.Errorf("AtLeastOnce with Kafka 2.4: %v", err)
	}
	if got := kafka.SaramaConfig(kafka.Config{Brokers: []string{"127.0.0.1:1"}, ConsumerGroup: "g"}).Consumer.IsolationLevel; got != sarama.ReadCommitted {
		t.Errorf("isolation level %v, want read_committed", got)
	}
}

// Two partitions of two groups never share a transactional id: with '.' as the separator,
// group "x.g" with topic "t" and group "x" with topic "g.t" did, and each fenced the other's
// producer (reproduced on kfake by review: one consumer committed 5 of its 10 records).
func TestTransactionalIDsDoNotCollide(t *testing.T) {
	a := kafka.TransactionalID("millrace", "x.g", "t", 0)
	b := kafka.TransactionalID("millrace", "x", "g.t", 0)
	if a == b {
		t.Fatalf("group x.g topic t and group x topic g.t share the transactional id %q", a)
	}
	if got := kafka.TransactionalID("millrace", "orders", "payments.events", 3); got != "millrace/orders/payments.events/3" {
		t.Fatalf("transactional id %q", got)
	}
}
