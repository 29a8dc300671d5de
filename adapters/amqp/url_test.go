package amqp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/testenv"
)

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// testAMQPURL is the test broker (MILLRACE_AMQP_URL, default DefaultURL) with query q.
func testAMQPURL(t *testing.T, q string) string {
	t.Helper()
	u := mustURL(t, testenv.Getenv("MILLRACE_AMQP_URL", DefaultURL))
	u.RawQuery = q
	return u.String()
}

// Each millrace parameter reaches its Config field, and none is left in Config.URL.
func TestURLParams(t *testing.T) {
	cfg, err := configFromURL(mustURL(t, "amqp://u:pw@127.0.0.1:5672/vh?queue_type=Quorum&delivery_limit=30&window=4&prefetch=5&dlq_suffix=.dead"), brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueueType != Quorum || cfg.DeliveryLimit != 30 || cfg.Window != 4 || cfg.Prefetch != 5 || cfg.DeadLetterSuffix != ".dead" || cfg.Logger == nil {
		t.Errorf("config %+v", cfg)
	}
	if cfg.URL != "amqp://u:pw@127.0.0.1:5672/vh" {
		t.Errorf("Config.URL = %q, want the URL without millrace's parameters", cfg.URL)
	}
	cfg, err = configFromURL(mustURL(t, "amqp://127.0.0.1"), brokerurl.Options{})
	if err != nil || cfg.QueueType != "" || cfg.DeadLetterSuffix != "" || cfg.URL != "amqp://127.0.0.1" {
		t.Errorf("no parameters: %+v, %v; want the adapter's defaults", cfg, err)
	}
}

// amqp091's own parameters pass through to amqp091 (auth_mechanism may repeat, as amqp091
// takes it); connection_timeout also bounds the operations connection's dial.
func TestURLClientParams(t *testing.T) {
	u := mustURL(t, "amqps://u:pw@h:5671/?heartbeat=5&connection_timeout=2500&channel_max=100&certfile=/c.pem&keyfile=/k.pem&cacertfile=/ca.pem&server_name_indication=sni&auth_mechanism=plain&auth_mechanism=external&prefetch=3")
	s, err := settingsFromURL(u, brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	uri, err := amqp091.ParseURI(s.cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	if uri.ConnectionTimeout != 2500 || uri.ChannelMax != 100 || uri.CertFile != "/c.pem" || uri.KeyFile != "/k.pem" ||
		uri.CACertFile != "/ca.pem" || uri.ServerName != "sni" || !slices.Equal(uri.AuthMechanism, []string{"plain", "external"}) {
		t.Errorf("amqp091 reads %+v from %s", uri, s.cfg.URL)
	}
	if !strings.Contains(s.cfg.URL, "heartbeat=5") || strings.Contains(s.cfg.URL, "prefetch") {
		t.Errorf("Config.URL = %s: want heartbeat passed on, prefetch kept", s.cfg.URL)
	}
	if s.cfg.Prefetch != 3 || s.dialTimeout != 2500*time.Millisecond {
		t.Errorf("prefetch %d, dial timeout %v; want 3, 2.5s", s.cfg.Prefetch, s.dialTimeout)
	}
}

// An unknown parameter is one error naming it, with what amqp:// takes, before any connection.
func TestURLUnknownParameter(t *testing.T) {
	_, err := brokerurl.OpenAdapter(context.Background(), "amqp://guest:guest@127.0.0.1:1/?foo=bar&prefetch=2", brokerurl.Options{})
	if !errors.Is(err, brokerurl.ErrUnknownParameter) {
		t.Fatalf("err = %v, want ErrUnknownParameter", err)
	}
	want := "amqp:// does not take foo (it takes delivery_limit, dlq_suffix, management, prefetch, queue_type, window; " +
		"and amqp091's auth_mechanism, cacertfile, certfile, channel_max, connection_timeout, heartbeat, keyfile, server_name_indication)"
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
}

// Bad values name the parameter and the rule, amqp091's included (its own messages name the
// wrong parameter for channel_max).
func TestURLBadValues(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{"queue_type=lazy", `amqp:// parameter queue_type="lazy" must be one of classic, quorum`},
		{"delivery_limit=-1", `amqp:// parameter delivery_limit="-1" must be a non-negative integer`},
		{"prefetch=1&prefetch=2", `amqp:// parameter prefetch="1,2" is given more than once`},
		{"heartbeat=5s", `amqp:// parameter heartbeat="5s" must be a non-negative integer (heartbeat in seconds, connection_timeout in milliseconds)`},
		{"connection_timeout=-3", `amqp:// parameter connection_timeout="-3" must be a non-negative integer`},
		{"channel_max=70000", `amqp:// parameter channel_max="70000" must be an integer from 0 to 65535`},
		{"auth_mechanism=plain&auth_mechanism=kerberos", `amqp:// parameter auth_mechanism="kerberos" must be plain, amqplain or external`},
		{"management=ftp://h", `amqp:// parameter management="ftp://h" must be the management API's http:// or https:// URL`},
		{"management=http://u:secret@", `amqp:// parameter management="http://u:xxxxx@" must be`},
		{"heartbeat=1&heartbeat=2", `amqp:// parameter heartbeat="1,2" is given more than once`},
	} {
		_, err := configFromURL(mustURL(t, "amqp://127.0.0.1/?"+tc.query), brokerurl.Options{})
		if !errors.Is(err, brokerurl.ErrInvalidURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrInvalidURL holding %q", tc.query, err, tc.want)
		}
	}
}

// The management API defaults to the AMQP host's port 15672 (15671 over TLS) with the AMQP
// URL's credentials, which a management URL of its own may replace.
func TestURLManagementURL(t *testing.T) {
	for _, tc := range []struct{ amqpURL, want string }{
		{"amqp://u:pw@rabbit:5672/vh", "http://u:pw@rabbit:15672"},
		{"amqps://u:pw@rabbit/vh", "https://u:pw@rabbit:15671"},
		{"amqp://127.0.0.1", "http://guest:guest@127.0.0.1:15672"},
		{"amqp://[::1]:5673", "http://guest:guest@[::1]:15672"},
		{"amqp://u:pw@rabbit?management=http://mgmt:8080/rabbit/", "http://u:pw@mgmt:8080/rabbit"},
		{"amqp://u:pw@rabbit?management=https://admin:s@mgmt", "https://admin:s@mgmt"},
	} {
		s, err := settingsFromURL(mustURL(t, tc.amqpURL), brokerurl.Options{})
		if err != nil {
			t.Errorf("%s: %v", tc.amqpURL, err)
			continue
		}
		if got := s.management.String(); got != tc.want {
			t.Errorf("%s: management %s, want %s", tc.amqpURL, got, tc.want)
		}
	}
}

// openTestBroker opens the test RabbitMQ as the CLI does, with query q.
func openTestBroker(t *testing.T, q string) brokerurl.Broker {
	t.Helper()
	raw := testAMQPURL(t, q)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := brokerurl.OpenBroker(ctx, raw, brokerurl.Options{NoConsume: true})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", brokerurl.Redact(raw), "MILLRACE_AMQP_URL", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// declareQueues declares durable queues with n messages each on the test broker, deleting them
// when the test ends.
func declareQueues(t *testing.T, depths map[string]int) {
	t.Helper()
	conn, err := amqp091.Dial(testAMQPURL(t, ""))
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", "MILLRACE_AMQP_URL", "MILLRACE_AMQP_URL", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for q, n := range depths {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c, err := conn.Channel(); err == nil {
				_, _ = c.QueueDelete(q, false, false, false)
				_ = c.Close()
			}
		})
		for range n {
			dc, err := ch.PublishWithDeferredConfirm("", q, true, false, amqp091.Publishing{Body: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			if !dc.Wait() {
				t.Fatalf("publish to %s nacked", q)
			}
		}
	}
}

func uniqueName(t *testing.T) string {
	return fmt.Sprintf("millrace-test.%s.%08x", strings.ToLower(t.Name()), rand.Uint32())
}

// A missing dead-letter queue is ErrDestinationNotFound in the words every broker uses;
// TopicExists tells whether a topic's work queue exists.
func TestURLDeadLettersMissing(t *testing.T) {
	b := openTestBroker(t, "")
	ctx := context.Background()
	name := uniqueName(t)
	_, err := b.DeadLetters(ctx, name+".dlq")
	if !errors.Is(err, deadletter.ErrDestinationNotFound) || err.Error() != `dead-letter queue "`+name+`.dlq" does not exist` {
		t.Errorf("err = %v, want ErrDestinationNotFound: dead-letter queue %q does not exist", err, name+".dlq")
	}
	if ok, err := b.TopicExists(ctx, name); ok || err != nil {
		t.Errorf("TopicExists(missing) = %v, %v", ok, err)
	}
	declareQueues(t, map[string]int{name: 0, name + ".dlq": 1})
	if ok, err := b.TopicExists(ctx, name); !ok || err != nil {
		t.Errorf("TopicExists(declared) = %v, %v", ok, err)
	}
	s, err := b.DeadLetters(ctx, name+".dlq")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Count(ctx, deadletter.Filter{}); n != 1 || err != nil {
		t.Errorf("Count = %d, %v; want 1", n, err)
	}
	_ = s.Close()
}

// DeadLetterDestinations lists, through the management API, the queues named with the
// dead-letter suffix (the URL's dlq_suffix), sorted, with their depths, and no other queue.
func TestURLDeadLetterDestinations(t *testing.T) {
	b := openTestBroker(t, "")
	requireManagement(t, b)
	prefix := uniqueName(t)
	declareQueues(t, map[string]int{prefix + ".b.dlq": 1, prefix + ".a.dlq": 3, prefix + ".work": 2, prefix + ".c.dead": 4})
	ctx := context.Background()
	ours := func(b brokerurl.Broker) []brokerurl.Destination {
		t.Helper()
		all, err := b.DeadLetterDestinations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(all, func(x, y brokerurl.Destination) int { return strings.Compare(x.Name, y.Name) }) {
			t.Errorf("not sorted: %+v", all)
		}
		var got []brokerurl.Destination
		for _, d := range all {
			if strings.HasPrefix(d.Name, prefix) {
				got = append(got, d)
			}
		}
		return got
	}
	want := []brokerurl.Destination{
		{Name: prefix + ".a.dlq", Topic: prefix + ".a", Depth: 3},
		{Name: prefix + ".b.dlq", Topic: prefix + ".b", Depth: 1},
	}
	if got := ours(b); !slices.Equal(got, want) {
		t.Errorf("destinations\n%+v\nwant\n%+v", got, want)
	}
	// Another connection's exclusive queue cannot be declared passively: it is listed with the
	// management API's count, marked approximate.
	conn, err := amqp091.Dial(testAMQPURL(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(prefix+".e.dlq", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	got := ours(b)
	if len(got) != 3 || got[2].Name != prefix+".e.dlq" || !got[2].Approximate || got[2].Depth != 0 {
		t.Errorf("with an exclusive queue: %+v, want it third, approximate, empty", got)
	}
	_ = conn.Close()

	want = []brokerurl.Destination{{Name: prefix + ".c.dead", Topic: prefix + ".c", Depth: 4}}
	if got := ours(openTestBroker(t, "dlq_suffix=.dead")); !slices.Equal(got, want) {
		t.Errorf("dlq_suffix=.dead: destinations\n%+v\nwant\n%+v", got, want)
	}
}

// requireManagement fails (in CI) or skips the test when the management API does not answer.
func requireManagement(t *testing.T, b brokerurl.Broker) {
	t.Helper()
	if _, err := b.(*urlBroker).listQueues(context.Background()); err != nil {
		testenv.Unreachable(t, "RabbitMQ's management API", b.(*urlBroker).management.Redacted(), "MILLRACE_AMQP_URL (?management=URL)", err)
	}
}

// Without the management API, listing fails with one line saying what it needs; with wrong
// credentials, that they were refused. Neither shows a password.
func TestURLDeadLetterDestinationsErrors(t *testing.T) {
	ctx := context.Background()
	_, err := openTestBroker(t, "management=http://u:secret@127.0.0.1:1").DeadLetterDestinations(ctx)
	if err == nil || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "secret") ||
		!strings.HasPrefix(err.Error(), "list dead-letter queues: RabbitMQ's management API at http://127.0.0.1:1 does not answer (dial tcp 127.0.0.1:1: connect: connection refused): listing needs the rabbitmq_management plugin") {
		t.Errorf("no management API: err = %v", err)
	}
	b := openTestBroker(t, "")
	requireManagement(t, b)
	m := b.(*urlBroker).management
	bad := *m
	bad.User = url.UserPassword("millrace-nobody", "secret")
	_, err = openTestBroker(t, "management="+url.QueryEscape(bad.String())).DeadLetterDestinations(ctx)
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), `refused user "millrace-nobody" (401)`) {
		t.Errorf("wrong credentials: err = %v", err)
	}
}

// An unreachable broker fails with one error naming it, without the password.
func TestURLUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := brokerurl.OpenBroker(ctx, "amqp://guest:secret@127.0.0.1:1/", brokerurl.Options{NoConsume: true})
	if err == nil || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("err = %v", err)
	}
	if os.Getenv("MILLRACE_TEST_VERBOSE") != "" {
		t.Log(err)
	}
}

// A replay to a topic whose exchange does not exist names the exchange and the broker's
// reason; one whose exchange routes nowhere says it is unroutable.
func TestURLPublishNativeErrors(t *testing.T) {
	b := openTestBroker(t, "").(*urlBroker)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := uniqueName(t)
	err := b.PublishNative(ctx, name, deadletter.Record{UUID: "u1", Payload: []byte("p")})
	if err == nil || !strings.Contains(err.Error(), `exchange "`+name+`"`) || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Errorf("missing exchange: err = %v, want it named with the broker's NOT_FOUND", err)
	}
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(name, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	err = b.PublishNative(ctx, name, deadletter.Record{UUID: "u2", Payload: []byte("p"), OriginalKey: "k"})
	if err == nil || !strings.Contains(err.Error(), "unroutable") || !strings.Contains(err.Error(), `key "k"`) {
		t.Errorf("exchange without queue: err = %v, want unroutable", err)
	}
}
