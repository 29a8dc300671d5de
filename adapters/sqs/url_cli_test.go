package sqs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
	"github.com/millrace/millrace/internal/clitest"
)

// TestURLCLIDeadLetterTopics: `millrace dlq topics` on sqs+http:// (fauxqs) lists the
// dead-letter queues with their approximate depth.
func TestURLCLIDeadLetterTopics(t *testing.T) {
	ep := localEndpoint(t)
	store := "sqs+http://" + ep.Host
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := brokerurl.OpenBroker(ctx, store+"?processing_budget=2s&visibility=3s", brokerurl.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a := b.Adapter().(*Adapter)
	topic := fmt.Sprintf("clitopics%08x", rand.Uint32())
	if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueues(t, a, topic, topic+"-dlq") })
	s, err := b.DeadLetters(ctx, a.DeadLetterTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Put(ctx, storetest.Sample(i, topic, deadletter.Exhausted)); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close() // the messages are visible again

	out := clitest.New(t).OK("dlq", "topics", "--store", store, "--json")
	var got struct {
		Destinations []struct {
			Name        string `json:"name"`
			Topic       string `json:"topic"`
			Depth       int64  `json:"depth"`
			Approximate bool   `json:"approximate"`
		} `json:"destinations"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("dlq topics --json: %v\n%s", err, out)
	}
	for _, d := range got.Destinations {
		if d.Name == topic+"-dlq" {
			if d.Topic != topic || d.Depth != 3 || !d.Approximate {
				t.Fatalf("dlq topics: %+v, want topic %s, depth 3, approximate", d, topic)
			}
			return
		}
	}
	t.Fatalf("dlq topics does not list %s-dlq:\n%s", topic, strings.TrimSpace(out))
}
