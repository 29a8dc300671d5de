package kafka

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// urlTestLogger writes warnings and errors to the test output.
func urlTestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// secureRoundTrip opens rawURL as the CLI and a consumer do and uses every client the adapter
// and its broker build: Provision (cluster admin), Publish (producer), Subscribe (consumer
// group, offset commits), a dead letter written in the partition's transaction (transactional
// producer), and DeadLetterDestinations reading it back (the dead-letter store's client).
func secureRoundTrip(t *testing.T, rawURL string) (topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := brokerurl.OpenBroker(ctx, rawURL, brokerurl.Options{Logger: urlTestLogger(t)})
	if err != nil {
		t.Fatalf("open %s: %v", brokerurl.Redact(rawURL), err)
	}
	defer b.Close()
	a := b.Adapter()
	topic = fmt.Sprintf("secured.%08x", rand.Uint32())
	if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	sent := message.NewMessage(watermill.NewUUID(), []byte("over a secured connection"))
	if err := a.Publisher().Publish(topic, sent); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	sub := a.Subscriber()
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	select {
	case got := <-ch:
		if got.UUID != sent.UUID || string(got.Payload) != string(sent.Payload) {
			t.Fatalf("received %s %q, want %s %q", got.UUID, got.Payload, sent.UUID, sent.Payload)
		}
		rec := deadletter.Record{UUID: got.UUID, Payload: got.Payload, Reason: deadletter.Exhausted, Attempts: 1,
			LastError: "test", OriginalTopic: topic, Broker: BrokerName, Handler: "secured"}
		if err := a.DeadLetter(ctx, got, rec); err != nil {
			t.Fatalf("DeadLetter: %v", err)
		}
		got.Ack()
	case <-ctx.Done():
		t.Fatalf("no message received on %s", topic)
	}
	want := []brokerurl.Destination{{Name: topic + DeadLetterSuffix, Topic: topic, Depth: 1}}
	var dests []brokerurl.Destination
	for ctx.Err() == nil {
		dests, err = b.DeadLetterDestinations(ctx)
		if err != nil {
			t.Fatalf("DeadLetterDestinations: %v", err)
		}
		var mine []brokerurl.Destination
		for _, d := range dests {
			if d.Topic == topic {
				mine = append(mine, d)
			}
		}
		if fmt.Sprint(mine) == fmt.Sprint(want) {
			return topic
		}
		dests = mine
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("DeadLetterDestinations: %+v, want %+v", dests, want)
	return ""
}

// saslUsers are the superusers of the SASL cluster; the passwords need percent-encoding.
var saslUsers = []struct{ mechanism, param, user, password string }{
	{"PLAIN", "plain", "plain-user", "pl@in:pass/word"},
	{"SCRAM-SHA-256", "scram-sha-256", "scram256-user", "s256 pass%word"},
	{"SCRAM-SHA-512", "scram-sha-512", "scram512-user", "s512#pass?word"},
}

func saslCluster(t *testing.T) string {
	var users []string
	for _, u := range saslUsers {
		users = append(users, u.mechanism+":"+u.user+":"+u.password)
	}
	return securedCluster(t, "-users", strings.Join(users, "\n"))
}

// saslURL is kafka://user:password@addr with the password percent-encoded.
func saslURL(addr, user, password, query string) string {
	u := url.URL{Scheme: "kafka", User: url.UserPassword(user, password), Host: addr, RawQuery: query}
	return u.String()
}

// TestURLSASL: each mechanism opens the cluster with the URL's userinfo and every client the
// adapter builds authenticates; a wrong password (or a user of another mechanism) fails with
// one line naming the mechanism and the user, and no password.
func TestURLSASL(t *testing.T) {
	addr := saslCluster(t)
	for _, u := range saslUsers {
		t.Run(u.param, func(t *testing.T) {
			secureRoundTrip(t, saslURL(addr, u.user, u.password, "group=g-"+u.param+"&sasl="+u.param))
		})
	}
	for _, u := range saslUsers {
		t.Run(u.param+"/wrong-password", func(t *testing.T) {
			wrong := u.password + "-wrong"
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := brokerurl.OpenBroker(ctx, saslURL(addr, u.user, wrong, "sasl="+u.param), brokerurl.Options{NoConsume: true})
			if !errors.Is(err, sarama.ErrSASLAuthenticationFailed) {
				t.Fatalf("wrong password: %v, want sarama.ErrSASLAuthenticationFailed", err)
			}
			msg := err.Error()
			for _, want := range []string{"SASL " + u.mechanism + " authentication", `user "` + u.user + `"`, "check the user and password"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
			if strings.Contains(msg, wrong) || strings.Contains(msg, url.QueryEscape(wrong)) || strings.Contains(msg, url.PathEscape(wrong)) || strings.Contains(msg, "\n") {
				t.Errorf("error %q shows the password or spans lines", msg)
			}
		})
	}
	t.Run("no-sasl-parameter", func(t *testing.T) {
		// The userinfo alone is refused before any connection: it would be ignored otherwise.
		_, err := brokerurl.OpenBroker(context.Background(), saslURL(addr, "plain-user", "x", ""), brokerurl.Options{NoConsume: true})
		if !errors.Is(err, brokerurl.ErrInvalidURL) || !strings.Contains(err.Error(), "parameter sasl") {
			t.Fatalf("userinfo without sasl: %v", err)
		}
	})
}

// TestURLTLS: a cluster whose certificate names kafka.test, signed by a test CA, and that
// requires client certificates. The CA, the client pair and the server name open it; an
// untrusted CA, a missing server name or a missing client certificate fail.
func TestURLTLS(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t, dir, "trusted")
	other := newTestPKI(t, dir, "untrusted")
	addr := securedCluster(t, "-tls-cert", pki.server, "-tls-key", pki.serverKey, "-tls-client-ca", pki.ca)
	q := func(ca string, extra ...string) string {
		v := url.Values{"tls_ca": {ca}, "tls_cert": {pki.client}, "tls_key": {pki.clientKey}, "tls_server_name": {"kafka.test"}}
		for i := 0; i+1 < len(extra); i += 2 {
			if extra[i+1] == "" {
				v.Del(extra[i])
			} else {
				v.Set(extra[i], extra[i+1])
			}
		}
		return "kafka://" + addr + "?" + v.Encode()
	}
	t.Run("trusted", func(t *testing.T) {
		secureRoundTrip(t, q(pki.ca, "group", "g-tls", "tls", "true"))
	})
	t.Run("insecure-skip-verify", func(t *testing.T) {
		secureRoundTrip(t, q(other.ca, "group", "g-skip", "tls_insecure_skip_verify", "true"))
	})
	open := func(t *testing.T, rawURL string) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		b, err := brokerurl.OpenBroker(ctx, rawURL, brokerurl.Options{NoConsume: true})
		if err == nil {
			_ = b.Close()
			t.Fatalf("%s opened", rawURL)
		}
		return err
	}
	t.Run("untrusted-ca", func(t *testing.T) {
		err := open(t, q(other.ca))
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) && !strings.Contains(err.Error(), "unknown authority") {
			t.Fatalf("untrusted CA: %v, want an unknown-authority error", err)
		}
	})
	t.Run("server-name-mismatch", func(t *testing.T) {
		// Without tls_server_name the certificate must name 127.0.0.1, which it does not.
		err := open(t, q(pki.ca, "tls_server_name", ""))
		if !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("no server name: %v, want a certificate error", err)
		}
	})
	t.Run("no-client-certificate", func(t *testing.T) {
		_ = open(t, q(pki.ca, "tls_cert", "", "tls_key", ""))
	})
	t.Run("plain-connection", func(t *testing.T) {
		_ = open(t, "kafka://"+addr)
	})
}

// TestURLSASLOverTLS: SCRAM-SHA-512 over TLS (SASL_SSL, as managed clusters run it).
func TestURLSASLOverTLS(t *testing.T) {
	pki := newTestPKI(t, t.TempDir(), "sasl-ssl")
	addr := securedCluster(t, "-tls-cert", pki.server, "-tls-key", pki.serverKey, "-users", "SCRAM-SHA-512:ssl-user:ssl pass")
	v := url.Values{"group": {"g-sasl-ssl"}, "sasl": {"scram-sha-512"}, "tls_ca": {pki.ca}, "tls_server_name": {"kafka.test"}}
	secureRoundTrip(t, saslURL(addr, "ssl-user", "ssl pass", v.Encode()))
}
