package amqp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/internal/backlogtest"
	"github.com/millrace/millrace/internal/testenv"
)

// TestBacklogReportsAKnownState, on classic and quorum queues: 6 messages published to a
// provisioned topic are ready; once a router has handled them (2 succeed, 2 are dead-lettered,
// 1 waits in the 1-minute retry tier, 1 is held by its handler) the backlog reads exactly that,
// in flight Unknown (AMQP cannot count unacknowledged messages; no Config.ManagementURL); an adapter that did not
// provision the topic does not know its tiers (RetriesWaiting Unknown); a topic without queues
// is an error.
func TestBacklogReportsAKnownState(t *testing.T) {
	for _, qt := range []amqp.QueueType{amqp.Classic, amqp.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a := newAdapter(ctx, t, amqp.Config{QueueType: qt})
			topic := uniqueTopic("backlog")
			policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{time.Minute, 2 * time.Minute}}
			if err := a.Provision(ctx, topic, policy); err != nil {
				t.Fatal(err)
			}
			backlogtest.Want(t, "provisioned", backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{InFlight: millrace.Unknown})
			for _, p := range []string{"ok", "ok", "dead", "dead", "retry", "hold"} {
				if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(p))); err != nil {
					t.Fatal(err)
				}
			}
			backlogtest.Want(t, "published", backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{Waiting: 6, InFlight: millrace.Unknown})

			var mu sync.Mutex
			calls := 0
			held, release := make(chan struct{}), make(chan struct{})
			runRouter(t, a, topic, policy, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
				mu.Lock()
				calls++
				mu.Unlock()
				switch string(msg.Payload) {
				case "dead":
					return millrace.Malformed(errors.New("not JSON"))
				case "retry":
					return errors.New("dependency down")
				case "hold":
					close(held)
					<-release
				}
				return nil
			})
			t.Cleanup(func() { close(release) }) // before the router's clean-up
			<-held
			deadline := time.Now().Add(20 * time.Second)
			for queueDepth(t, a.DeadLetterTopic(topic)) != 2 || queueDepth(t, topic+".retry") != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("timed out: DLQ %d, retry tier %d, want 2 and 1", queueDepth(t, a.DeadLetterTopic(topic)), queueDepth(t, topic+".retry"))
				}
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			if calls != 6 {
				t.Errorf("%d handler calls, want 6", calls)
			}
			mu.Unlock()
			backlogtest.Want(t, "handled", backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{InFlight: millrace.Unknown, RetriesWaiting: 1, DeadLetters: 2})

			other := newAdapter(ctx, t, amqp.Config{QueueType: qt})
			backlogtest.Want(t, "another adapter", backlogtest.Read(t, other, topic, 5*time.Second),
				millrace.Backlog{InFlight: millrace.Unknown, RetriesWaiting: millrace.Unknown, DeadLetters: 2})
			if _, err := other.Backlog(ctx, uniqueTopic("backlog-none")); err == nil {
				t.Fatal("Backlog of a topic without queues: no error")
			}
			done, stop := context.WithCancel(ctx)
			stop()
			if _, err := a.Backlog(done, topic); !errors.Is(err, context.Canceled) {
				t.Fatalf("Backlog with a cancelled context: %v, want context.Canceled", err)
			}
		})
	}
}

// testManagementURL is the test broker's management API (the credentials are Config.URL's).
const testManagementURL = "http://127.0.0.1:15672"

// requireManagementAPI fails (in CI) or skips the test when the management API does not answer.
func requireManagementAPI(t *testing.T) {
	t.Helper()
	resp, err := http.Get(testManagementURL + "/api/overview")
	if err == nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ's management API", testManagementURL, "(source .ci/services/local.sh)", err)
	}
}

// lockedBuffer is a log destination read while adapters write to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBacklogInFlightFromManagementAPI, on classic and quorum queues: of 5 messages published,
// a consumer with prefetch 2 holds 2 unacknowledged; with Config.ManagementURL the backlog reads
// in flight 2 and waiting 3 (and 0 and 5 once the consumer's channel closed); so does an adapter
// opened by URL with management=...; with the management API on a closed port, in flight is
// Unknown, the other counts are right, and the failure is logged once, without the password.
func TestBacklogInFlightFromManagementAPI(t *testing.T) {
	requireManagementAPI(t)
	for _, qt := range []amqp.QueueType{amqp.Classic, amqp.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			a := newAdapter(ctx, t, amqp.Config{QueueType: qt, ManagementURL: testManagementURL})
			topic := uniqueTopic("backlog-unacked")
			policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Delays{time.Minute}}
			if err := a.Provision(ctx, topic, policy); err != nil {
				t.Fatal(err)
			}
			const published, held = 5, 2
			for range published {
				if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
					t.Fatal(err)
				}
			}
			conn, err := amqp091.Dial(brokerURL())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Qos(held, 0, false); err != nil {
				t.Fatal(err)
			}
			deliveries, err := ch.Consume(topic, "", false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range held {
				select {
				case <-deliveries:
				case <-ctx.Done():
					t.Fatal("timed out waiting for a delivery")
				}
			}
			want := millrace.Backlog{Waiting: published - held, InFlight: held}
			got := backlogtest.Await(t, a, topic, "held", 5*time.Second, 20*time.Second, 200*time.Millisecond, func(b millrace.Backlog) bool { return b.InFlight == held })
			backlogtest.Want(t, "held", got, want)

			byURL, err := brokerurl.OpenAdapter(ctx, brokerURL()+"?management="+url.QueryEscape(testManagementURL), brokerurl.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer byURL.Close()
			got = backlogtest.Await(t, byURL.(millrace.BacklogReporter), topic, "opened by URL", 5*time.Second, 20*time.Second, 200*time.Millisecond, func(b millrace.Backlog) bool { return b.InFlight == held })
			backlogtest.Want(t, "opened by URL", got, millrace.Backlog{Waiting: published - held, InFlight: held, RetriesWaiting: millrace.Unknown})

			var logs lockedBuffer
			closed := newAdapter(ctx, t, amqp.Config{QueueType: qt, ManagementURL: "http://u:secret@127.0.0.1:1",
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			noAPI := millrace.Backlog{Waiting: published - held, InFlight: millrace.Unknown, RetriesWaiting: millrace.Unknown}
			backlogtest.Want(t, "management API on a closed port", backlogtest.Read(t, closed, topic, 5*time.Second), noAPI)
			backlogtest.Want(t, "management API on a closed port, again", backlogtest.Read(t, closed, topic, 5*time.Second), noAPI)
			out := logs.String()
			if n := strings.Count(out, "management API failed"); n != 1 || !strings.Contains(out, "http://127.0.0.1:1 does not answer") ||
				!strings.Contains(out, topic) || strings.Contains(out, "secret") {
				t.Errorf("management API on a closed port: %d warnings, want 1 naming the API and the topic, without the password:\n%s", n, out)
			}

			if err := ch.Close(); err != nil { // the 2 deliveries go back to the queue
				t.Fatal(err)
			}
			got = backlogtest.Await(t, a, topic, "released", 5*time.Second, 20*time.Second, 200*time.Millisecond, func(b millrace.Backlog) bool { return b.InFlight == 0 })
			backlogtest.Want(t, "released", got, millrace.Backlog{Waiting: published})
		})
	}
}

// A management API answering what is not a count leaves in flight Unknown and the rest of
// the backlog reported: a negative, fractional or overflowing count, none, a string, an
// error status, a body past the 1 MiB bound, no answer within ctx. The request names the work queue in the
// escaped virtual host, with Config.URL's credentials.
func TestBacklogManagementAnswersThatAreNotACount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var status int
	var body, path, auth string
	var hang bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if hang {
			mu.Unlock()
			<-r.Context().Done()
			mu.Lock()
			return
		}
		path = r.URL.EscapedPath()
		user, password, _ := r.BasicAuth()
		auth = user + ":" + password
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	defer api.Close()
	a := newAdapter(ctx, t, amqp.Config{ManagementURL: api.URL, Logger: slog.New(slog.DiscardHandler)})
	topic := uniqueTopic("backlog-api")
	if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   int64
	}{
		{"a count", http.StatusOK, `{"name":"q","messages_unacknowledged":4,"messages_ready":1}`, 4},
		{"zero", http.StatusOK, `{"messages_unacknowledged":0}`, 0},
		{"negative", http.StatusOK, `{"messages_unacknowledged":-3}`, millrace.Unknown},
		{"fractional", http.StatusOK, `{"messages_unacknowledged":1.5}`, millrace.Unknown},
		{"overflowing", http.StatusOK, `{"messages_unacknowledged":99999999999999999999}`, millrace.Unknown},
		{"absent", http.StatusOK, `{"name":"q"}`, millrace.Unknown},
		{"null", http.StatusOK, `{"messages_unacknowledged":null}`, millrace.Unknown},
		{"a word", http.StatusOK, `{"messages_unacknowledged":"many"}`, millrace.Unknown},
		{"not JSON", http.StatusOK, `<html>`, millrace.Unknown},
		{"an array", http.StatusOK, `[]`, millrace.Unknown},
		{"past 1 MiB", http.StatusOK, `{"pad":"` + strings.Repeat("x", 1<<20) + `","messages_unacknowledged":4}`, millrace.Unknown},
		{"unauthorized", http.StatusUnauthorized, `{"messages_unacknowledged":4}`, millrace.Unknown},
		{"not found", http.StatusNotFound, `{"messages_unacknowledged":4}`, millrace.Unknown},
		{"server error", http.StatusInternalServerError, `{"messages_unacknowledged":4}`, millrace.Unknown},
	} {
		mu.Lock()
		status, body = tc.status, tc.body
		mu.Unlock()
		backlogtest.Want(t, tc.name, backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{Waiting: 1, InFlight: tc.want})
	}
	mu.Lock()
	hang = true
	mu.Unlock()
	// An API that does not answer gives up by 4/5 of ctx's time: the backlog comes back before ctx ends.
	hangCtx, hangCancel := context.WithTimeout(ctx, 5*time.Second)
	b, err := a.Backlog(hangCtx, topic)
	if hangCtx.Err() != nil || err != nil {
		t.Errorf("API that hangs: Backlog returned %v after its ctx ended (%v), want the other counts before", err, hangCtx.Err())
	}
	hangCancel()
	backlogtest.Want(t, "API that hangs", b, millrace.Backlog{Waiting: 1, InFlight: millrace.Unknown})
	mu.Lock()
	hang = false
	defer mu.Unlock()
	if want := "/api/queues/%2F/" + url.PathEscape(topic); path != want || auth != "guest:guest" {
		t.Errorf("request for %s as %q, want %s as guest:guest", path, auth, want)
	}
}

// Config.ManagementURL must be an http(s) URL with a host and no query; the error names the
// field and hides the password.
func TestConfigManagementURL(t *testing.T) {
	for _, ok := range []string{"", "http://127.0.0.1:15672", "https://admin:pw@rabbit.internal/rabbitmq/", "HTTP://h"} {
		if err := (amqp.Config{ManagementURL: ok}).Validate(); err != nil {
			t.Errorf("ManagementURL %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"ftp://h", "http://", "http://:15672", "127.0.0.1:15672", "rabbit", "http://h/?x=1", "http://h/#top",
		"http://u:secret@", "http://u:secret@h:bad"} {
		err := (amqp.Config{ManagementURL: bad}).Validate()
		var ce *millrace.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Config.ManagementURL" || !strings.Contains(err.Error(), "http:// or https://") ||
			strings.Contains(err.Error(), "secret") {
			t.Errorf("ManagementURL %q: %v, want a ConfigError naming Config.ManagementURL and the rule, without the password", bad, err)
		}
	}
}
