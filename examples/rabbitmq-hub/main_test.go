package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/internal/testenv"
)

// TestHubExample runs the example with a short delay on queues of its own and checks the table.
func TestHubExample(t *testing.T) {
	url := testenv.Getenv("MILLRACE_AMQP_URL", amqp.DefaultURL)
	if conn, err := amqp091.Dial(url); err != nil {
		testenv.Unreachable(t, "RabbitMQ", url, "MILLRACE_AMQP_URL", err)
	} else {
		_ = conn.Close()
	}
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	o := options{url: url, queue: "hub-example-" + suffix, exchange: "hub-example-events-" + suffix, delay: 300 * time.Millisecond}
	var out bytes.Buffer
	if err := run(context.Background(), &out, o); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := []string{
		`hub\.order\.cancelled\s+1\s+SUCCESS\s+no`,
		`hub\.order\.created\s+3\s+SUCCESS\s+no`,
		`hub\.order\.shipped\s+1\s+MALFORMED\s+yes \(malformed\)`,
		`hub\.payment\.failed\s+3\s+RETRY\s+yes \(exhausted\)`,
		`hub\.user\.renamed\s+1\s+DISCARD\s+yes \(discarded\)`,
	}
	for _, p := range want {
		if !regexp.MustCompile(`(?m)^` + p + `\s*$`).Match(out.Bytes()) {
			t.Errorf("no row matching %q in:\n%s", p, out.String())
		}
	}
	if regexp.MustCompile(`attempt \d+/\d+\s+audit\.order\.created`).Match(out.Bytes()) {
		t.Errorf("a message not matched by hub.# was delivered:\n%s", out.String())
	}
	if !bytes.Contains(out.Bytes(), []byte(`publish with key "audit.order.created" refused`)) {
		t.Errorf("the unroutable publish was not refused:\n%s", out.String())
	}
	if n := bytes.Count(out.Bytes(), []byte(`delivered with key "`+o.queue+`"`)); n != 4 {
		t.Errorf("want 4 retried deliveries arriving with the queue name as key, got %d:\n%s", n, out.String())
	}
}
