package sqs

import (
	"context"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/brokerurl"
)

// openFake opens f through the default Mux as sqs+https://, trusting its certificate, with the
// credentials of a named profile; adapter chooses OpenAdapter (a consumer) over OpenBroker.
func openFake(t *testing.T, f *fakeSQS, adapter bool) (brokerurl.Broker, error) {
	t.Helper()
	useProfile(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	raw := "sqs+https://" + strings.TrimPrefix(f.srv.URL, "https://") + "?processing_budget=2s&visibility=3s"
	if adapter {
		a, err := brokerurl.OpenAdapter(ctx, raw, brokerurl.Options{})
		if err != nil {
			return nil, err
		}
		_ = a.Close()
		return nil, nil
	}
	return brokerurl.OpenBroker(ctx, raw, brokerurl.Options{NoConsume: true})
}

// TestURLAccessDeniedListQueues: a role without sqs:ListQueues (a least-privilege consumer's)
// opens: AccessDenied answers an authenticated request, so the endpoint is reachable and the
// credentials good. An operation that needs ListQueues then fails on its own call, naming it.
func TestURLAccessDeniedListQueues(t *testing.T) {
	for _, c := range []struct {
		name string
		fl   fault
	}{
		// What SQS answers in its JSON protocol, with its query-compatible code.
		{"json with query code", fault{http.StatusBadRequest, "com.amazon.coral.service#AccessDeniedException", "AccessDenied"}},
		{"json AccessDeniedException", fault{http.StatusBadRequest, "com.amazon.coral.service#AccessDeniedException", ""}},
		{"AccessDenied 403", fault{http.StatusForbidden, "AccessDenied", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeSQS(t, []string{"orders", "orders-dlq"}, nil)
			f.faults = map[string]fault{"ListQueues": c.fl}
			if _, err := openFake(t, f, true); err != nil {
				t.Fatalf("OpenAdapter: %v, want the denied ListQueues taken as an answer", err)
			}
			b, err := openFake(t, f, false)
			if err != nil {
				t.Fatalf("OpenBroker: %v, want the denied ListQueues taken as an answer", err)
			}
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// Calls other than ListQueues are allowed: the topic's queue is found.
			if ok, err := b.TopicExists(ctx, "orders"); !ok || err != nil {
				t.Errorf("TopicExists(orders) = %v, %v; want true", ok, err)
			}
			_, err = b.DeadLetterDestinations(ctx)
			if err == nil || !strings.Contains(err.Error(), "list queues") || !strings.Contains(err.Error(), "AccessDenied") {
				t.Errorf("DeadLetterDestinations: %v, want its own ListQueues call to fail with AccessDenied", err)
			}
		})
	}
}

// TestURLBadCredentialsRefused: a key AWS does not know, a bad signature and an unreachable
// endpoint still fail the open, with the endpoint's answer.
func TestURLBadCredentialsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		fl   fault
	}{
		{"InvalidClientTokenId", fault{http.StatusForbidden, "com.amazon.coral.service#InvalidClientTokenId", "InvalidClientTokenId"}},
		{"SignatureDoesNotMatch", fault{http.StatusForbidden, "com.amazon.coral.service#SignatureDoesNotMatch", "SignatureDoesNotMatch"}},
		{"UnrecognizedClientException", fault{http.StatusBadRequest, "com.amazon.coral.service#UnrecognizedClientException", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeSQS(t, nil, nil)
			f.faults = map[string]fault{"ListQueues": c.fl}
			for _, adapter := range []bool{true, false} {
				b, err := openFake(t, f, adapter)
				if err == nil {
					if b != nil {
						_ = b.Close()
					}
					t.Fatalf("open (adapter only: %v) succeeded, want %s refused", adapter, c.name)
				}
				if !strings.HasPrefix(err.Error(), "connect to sqs+https://") || !strings.Contains(err.Error(), c.name) {
					t.Errorf("open (adapter only: %v): %v, want connect to ...: %s", adapter, err, c.name)
				}
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		f := newFakeSQS(t, nil, nil)
		f.srv.Close()
		_, err := openFake(t, f, true)
		if err == nil || !strings.Contains(err.Error(), "connect to sqs+https://") {
			t.Errorf("OpenAdapter of a closed endpoint: %v, want connect to ...", err)
		}
	})
}
