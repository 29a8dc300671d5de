package kafka

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/millrace/millrace/internal/clitest"
)

// TestURLCLISecuredCluster: the millrace command reaches a cluster that takes SCRAM-SHA-512 over
// TLS only, with the URL alone: dlq topics and dlq list read the dead letter a consumer wrote;
// a wrong password is one line on stderr, exit 1, without the password.
func TestURLCLISecuredCluster(t *testing.T) {
	pki := newTestPKI(t, t.TempDir(), "cli")
	addr := securedCluster(t, "-tls-cert", pki.server, "-tls-key", pki.serverKey, "-users", "SCRAM-SHA-512:cli-user:cli pass!")
	q := url.Values{"sasl": {"scram-sha-512"}, "tls_ca": {pki.ca}, "tls_server_name": {"kafka.test"}}
	topic := secureRoundTrip(t, saslURL(addr, "cli-user", "cli pass!", "group=g-cli&"+q.Encode()))
	store := saslURL(addr, "cli-user", "cli pass!", q.Encode())

	cli := clitest.New(t)
	var topics struct {
		Destinations []struct {
			Name  string `json:"name"`
			Topic string `json:"topic"`
			Depth int64  `json:"depth"`
		} `json:"destinations"`
	}
	out := cli.OK("dlq", "topics", "--store", store, "--json")
	if err := json.Unmarshal([]byte(out), &topics); err != nil {
		t.Fatalf("dlq topics --json: %v\n%s", err, out)
	}
	if len(topics.Destinations) != 1 || topics.Destinations[0].Name != topic+DeadLetterSuffix || topics.Destinations[0].Depth != 1 {
		t.Fatalf("dlq topics: %s, want %s.dlq with 1 dead letter", out, topic)
	}
	if l := cli.ListJSON("--store", store, "--topic", topic); l.Total != 1 || len(l.Entries) != 1 || l.Entries[0].Handler != "secured" {
		t.Fatalf("dlq list: %+v, want the one dead letter of handler secured", l)
	}
	if strings.Contains(out, "cli pass") || strings.Contains(out, url.QueryEscape("cli pass!")) {
		t.Errorf("dlq topics shows the password: %s", out)
	}

	r := cli.Run("", "dlq", "topics", "--store", saslURL(addr, "cli-user", "wrong pass!", q.Encode()))
	if r.Code != 1 || !clitest.OneLine(r.Stderr) || !strings.Contains(r.Stderr, `SASL SCRAM-SHA-512 authentication of user "cli-user" failed`) ||
		strings.Contains(r.Stderr, "wrong") {
		t.Fatalf("wrong password: exit %d, stderr %q; want exit 1 and one line naming the mechanism and user, not the password", r.Code, r.Stderr)
	}
	t.Logf("wrong password: %s", r.Stderr)
}
