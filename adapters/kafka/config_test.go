package kafka_test

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

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
