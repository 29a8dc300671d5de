package redisstream

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// commandLog is a go-redis hook that records the XREADGROUP and XACK commands a client sends,
// alone or in pipelines.
type commandLog struct {
	mu    sync.Mutex
	reads []string // each XREADGROUP's COUNT argument
	acks  []int    // each XACK's number of IDs
}

func (l *commandLog) record(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) == 0 {
		return
	}
	name, _ := args[0].(string)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch strings.ToUpper(name) {
	case "XREADGROUP":
		for i := 1; i+1 < len(args); i++ {
			if s, _ := args[i].(string); strings.EqualFold(s, "COUNT") {
				l.reads = append(l.reads, fmt.Sprint(args[i+1]))
			}
		}
	case "XACK": // XACK stream group id...
		l.acks = append(l.acks, len(args)-3)
	}
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.record(cmd)
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			l.record(cmd)
		}
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*commandLog)(nil)

// TestReadsAndAcksAreBatched: 300 entries consumed and acked through a subscription (default
// Window, 64) go to Redis in few commands: the reads ask XREADGROUP for more than one entry (COUNT, up to the free part
// of the Window), so they take far fewer than one read per entry, and the acks go out as XACKs
// of several IDs each (the acker's batches), every ID acknowledged. An adapter that reads or
// acks one entry per command fails.
func TestReadsAndAcksAreBatched(t *testing.T) {
	const messages = 300
	log := &commandLog{}
	c := testClient(t)
	c.AddHook(log)
	cfg := testConfig()
	cfg.Client = c
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	msgs := make([]*message.Message, messages)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
	}
	// Published before the subscription starts (the group starts at "0"), and acked half a
	// Window at a time: what a read can take does not depend on how fast the publisher and the
	// handlers run.
	if err := a.Publisher().Publish(stream, msgs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out, err := a.Subscriber().Subscribe(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var held []*message.Message
	for len(seen) < messages {
		select {
		case m := <-out:
			seen[m.UUID] = true
			if held = append(held, m); len(held) == DefaultWindow/2 || len(seen) == messages {
				for _, m := range held {
					m.Ack()
				}
				held = held[:0]
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages delivered after 30 s", len(seen), messages)
		}
	}
	acked := func() int {
		log.mu.Lock()
		defer log.mu.Unlock()
		n := 0
		for _, ids := range log.acks {
			n += ids
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); acked() < messages; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("XACKs carried %d IDs after 30 s, want %d", acked(), messages)
		}
	}
	if n, err := c.XPending(context.Background(), stream, cfg.Group).Result(); err != nil || n.Count != 0 {
		t.Errorf("XPENDING after every ack: %+v, %v; want none pending", n, err)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	t.Logf("%d messages: %d XREADGROUP (COUNT %v), %d XACK (IDs %v)", messages, len(log.reads), log.reads, len(log.acks), log.acks)
	if len(log.reads) >= messages/2 {
		t.Errorf("%d XREADGROUP calls for %d entries: reads are not batched", len(log.reads), messages)
	}
	most := 0
	for _, ids := range log.acks {
		most = max(most, ids)
	}
	if most < 2 || len(log.acks) >= messages/2 {
		t.Errorf("%d XACKs for %d entries, at most %d IDs in one: acks are not batched", len(log.acks), messages, most)
	}
}
