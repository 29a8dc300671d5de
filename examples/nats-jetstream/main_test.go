package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/millrace/millrace/adapters/nats"
	"github.com/millrace/millrace/internal/testenv"
)

// TestNATSJetStreamExample runs the example with a short delay on a subject of its own and
// checks the table, the retry's delay and the dead letter's payload.
func TestNATSJetStreamExample(t *testing.T) {
	url := testenv.Getenv("MILLRACE_NATS_URL", nats.DefaultURL)
	if nc, err := natsgo.Connect(url, natsgo.Timeout(2*time.Second), natsgo.MaxReconnects(0)); err != nil {
		testenv.Unreachable(t, "NATS", url, "MILLRACE_NATS_URL", err)
	} else {
		nc.Close()
	}
	const delay = 300 * time.Millisecond
	o := options{url: url, subject: fmt.Sprintf("example-test.orders.%08x", rand.Uint32()), delay: delay}
	var out bytes.Buffer
	if err := run(context.Background(), &out, o); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, p := range []string{
		`order-1\s+1\s+SUCCESS\s+no`,
		`order-2\s+1\s+SUCCESS\s+no`,
		`order-3\s+1\s+SUCCESS\s+no`,
		`order-flaky\s+2\s+SUCCESS\s+no`,
		`order-poison\s+3\s+RETRY\s+yes \(exhausted\)`,
	} {
		if !regexp.MustCompile(`(?m)^` + p + `\s*$`).Match(out.Bytes()) {
			t.Errorf("no row matching %q in:\n%s", p, out.String())
		}
	}
	for _, want := range []string{
		`order-poison  reason=exhausted attempts=3 error="payment provider timeout"`,
		`tenant=acme`,
		`payload "\x00\xff{\"order\":5,\"note\":\"naïve ✓\"}\x7f"`,
		"payload byte for byte: true (",
		"messages pending on the consumer: 0",
	} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Each retry came no earlier than its delay, and with JetStream's own delivery count.
	gaps := regexp.MustCompile(`attempt (\d)/3  NumDelivered (\d+) .*\((\d+\.\d+)s after attempt \d failed`).FindAllSubmatch(out.Bytes(), -1)
	if len(gaps) != 3 { // order-flaky once, order-poison twice
		t.Fatalf("want 3 retries, got %d:\n%s", len(gaps), out.String())
	}
	for _, g := range gaps {
		s, _ := strconv.ParseFloat(string(g[3]), 64)
		if time.Duration(s*float64(time.Second)) < delay-10*time.Millisecond || string(g[1]) != string(g[2]) {
			t.Errorf("retry %s: %ss after the failure (delay %s), NumDelivered %s:\n%s", g[1], g[3], delay, g[2], out.String())
		}
	}
}
