package kafka

import (
	"errors"
	"fmt"
	"sync"

	"github.com/IBM/sarama"
)

// offsetCommitter commits a subscription's marked offsets (Config.AtLeastOnce mode) over a
// client of its own, not the consumer group's.
//
// Why its own connection: Kafka brokers answer the requests of one connection in order, and
// the group's client sends its fetch long-polls (Consumer.MaxWaitTime, 500 ms) to the same
// broker connection as its commits, so a commit sent while a fetch waits was answered only
// when the fetch returned: measured from outside, success-to-commit took 503-511 ms for half
// the records while CommitInterval is 10 ms. A commit on its own connection is answered in a
// round trip. It carries the session's generation and member id, as sarama's own commits do,
// so the coordinator refuses it from a member that is no longer in the group.
type offsetCommitter struct {
	client     sarama.Client
	group      string
	version    sarama.KafkaVersion
	instanceID *string

	// sending is held through a whole commit (take the marks, send, put them back on failure),
	// so that with SyncCommit, where every worker commits, a commit returns only once the
	// marks it found were committed, requests never overtake each other (an older one landing
	// last would move the committed offset back), and a failed one never puts back a mark a
	// later one committed.
	sending sync.Mutex

	mu    sync.Mutex
	marks map[string]map[int32]int64 // next offset to commit, per partition, not yet committed
}

func newOffsetCommitter(client sarama.Client, group string, sc *sarama.Config) *offsetCommitter {
	c := &offsetCommitter{client: client, group: group, version: sc.Version, marks: map[string]map[int32]int64{}}
	if id := sc.Consumer.Group.InstanceId; id != "" {
		c.instanceID = &id
	}
	return c
}

// mark records next as the offset to commit for topic/partition: every record before it was
// acknowledged. Marks only move forward.
func (c *offsetCommitter) mark(topic string, partition int32, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	parts := c.marks[topic]
	if parts == nil {
		parts = map[int32]int64{}
		c.marks[topic] = parts
	}
	if next > parts[partition] {
		parts[partition] = next
	}
}

// forget drops the marks not yet committed: the partitions belong to the next session now.
func (c *offsetCommitter) forget() {
	c.mu.Lock()
	clear(c.marks)
	c.mu.Unlock()
}

// commit sends the marks made since the last commit for the session's generation. Marks whose
// commit failed stay, for the next call (unless a later mark replaced them).
func (c *offsetCommitter) commit(sess sarama.ConsumerGroupSession) error {
	c.sending.Lock()
	defer c.sending.Unlock()
	c.mu.Lock()
	taken := c.marks
	c.marks = map[string]map[int32]int64{}
	c.mu.Unlock()
	if len(taken) == 0 {
		return nil
	}
	req := c.request(sess.GenerationID(), sess.MemberID())
	for topic, parts := range taken {
		for partition, next := range parts {
			req.AddBlock(topic, partition, next, sarama.ReceiveTime, "")
		}
	}
	err := c.send(req, taken)
	if err != nil {
		c.mu.Lock()
		for topic, parts := range taken {
			for partition, next := range parts {
				if cur, ok := c.marks[topic][partition]; !ok || cur < next {
					if c.marks[topic] == nil {
						c.marks[topic] = map[int32]int64{}
					}
					c.marks[topic][partition] = next
				}
			}
		}
		c.mu.Unlock()
	}
	return err
}

// send commits req at the group's coordinator; a partition the coordinator refused makes it
// fail, and a coordinator error has the coordinator looked up again for the next commit.
func (c *offsetCommitter) send(req *sarama.OffsetCommitRequest, taken map[string]map[int32]int64) error {
	coordinator, err := c.client.Coordinator(c.group)
	if err != nil {
		return fmt.Errorf("kafka: find the coordinator of group %q: %w", c.group, err)
	}
	resp, err := coordinator.CommitOffset(req)
	if err != nil {
		_ = c.client.RefreshCoordinator(c.group)
		return fmt.Errorf("kafka: commit offsets of group %q: %w", c.group, err)
	}
	var errs []error
	for topic, parts := range taken {
		for partition := range parts {
			kerr, ok := resp.Errors[topic][partition]
			if !ok {
				errs = append(errs, fmt.Errorf("%s/%d: no answer", topic, partition))
				continue
			}
			if kerr == sarama.ErrNoError {
				continue
			}
			if errors.Is(kerr, sarama.ErrNotCoordinatorForConsumer) || errors.Is(kerr, sarama.ErrConsumerCoordinatorNotAvailable) {
				_ = c.client.RefreshCoordinator(c.group)
			}
			errs = append(errs, fmt.Errorf("%s/%d: %w", topic, partition, kerr))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kafka: commit offsets of group %q: %w", c.group, errors.Join(errs...))
	}
	return nil
}

// request is an empty OffsetCommitRequest of the version sarama's own offset manager uses for
// the configured Kafka version.
func (c *offsetCommitter) request(generation int32, member string) *sarama.OffsetCommitRequest {
	r := &sarama.OffsetCommitRequest{Version: 1, ConsumerGroup: c.group, ConsumerGroupGeneration: generation, ConsumerID: member}
	switch v := c.version; {
	case v.IsAtLeast(sarama.V2_4_0_0):
		r.Version = 8
	case v.IsAtLeast(sarama.V2_3_0_0):
		r.Version = 7
	case v.IsAtLeast(sarama.V2_1_0_0):
		r.Version = 6
	case v.IsAtLeast(sarama.V2_0_0_0):
		r.Version = 4
	case v.IsAtLeast(sarama.V0_11_0_0):
		r.Version = 3
	case v.IsAtLeast(sarama.V0_9_0_0):
		r.Version = 2
	}
	if r.Version >= 7 {
		r.GroupInstanceId = c.instanceID
	}
	if r.Version >= 2 && r.Version <= 4 {
		r.RetentionTime = -1 // the broker's offsets.retention.minutes
	}
	return r
}
