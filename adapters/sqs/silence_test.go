package sqs_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance/cutbattery"
)

// TestCallTimeoutEndsASilentConnection: a publish on a connection that went silent (the cut
// battery's black hole: the proxy still holds the TCP connection and answers nothing) fails
// after Config.CallTimeout instead of waiting for ever, although watermill-aws publishes with
// context.Background() and aws-sdk-go-v2's HTTP client has no request timeout; once the network
// is back the next publish works on a new connection.
func TestCallTimeoutEndsASilentConnection(t *testing.T) {
	ep := endpoint(t)
	u, err := url.Parse(ep)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := cutbattery.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cfg := testConfig(t)
	cfg.Endpoint = "http://" + proxy.Addr()
	cfg.CallTimeout = 500 * time.Millisecond
	a := newAdapter(t, cfg)
	topic := uniqueTopic("silent")
	publish := func() error {
		return a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("through the proxy")))
	}
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	// Leaves the publisher's SQS client a pooled connection, which the cut silences.
	if err := publish(); err != nil {
		t.Fatal(err)
	}

	proxy.Cut(cutbattery.BlackHole)
	errc := make(chan error, 1)
	go func() { errc <- publish() }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("a publish through a black hole succeeded")
		}
		if !strings.Contains(err.Error(), "SendMessage") || !strings.Contains(err.Error(), "sqs.Config.CallTimeout") {
			t.Fatalf("publish failed, but not on CallTimeout: %v", err)
		}
		t.Logf("publish through the black hole: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("a publish on a silent connection is still waiting after 60s: no request timeout")
	}
	if st := proxy.Stats(); st.BlackHoled == 0 || st.ClientsGaveUp == 0 {
		t.Fatalf("proxy %+v: the publish did not go through a black-holed connection the client then closed", st)
	}

	proxy.Restore()
	go func() { errc <- publish() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("publish after the network came back: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("publish after the network came back still waiting after 60s")
	}
}
