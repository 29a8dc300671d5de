package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
	"github.com/millrace/millrace/internal/testenv"
)

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestURLParametersReachConfig: each parameter sets its Config (or Config.Sarama) field.
func TestURLParametersReachConfig(t *testing.T) {
	u := mustParse(t, "kafka://alice:s%3Acret@h1:9092,h2:9093?group=billing&at_least_once=true&transactional_id_prefix=tx"+
		"&partitions=6&replication_factor=3&version=3.6.0&sasl=scram-sha-512&tls=true&tls_ca=/ca.pem"+
		"&tls_cert=/c.pem&tls_key=/k.pem&tls_server_name=kafka.internal&tls_insecure_skip_verify=true")
	cfg, x, err := parseURL(u, brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.Sarama
	if sc == nil {
		t.Fatal("Config.Sarama is nil")
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"Brokers", cfg.Brokers, []string{"h1:9092", "h2:9093"}},
		{"ConsumerGroup", cfg.ConsumerGroup, "billing"},
		{"AtLeastOnce", cfg.AtLeastOnce, true},
		{"TransactionalIDPrefix", cfg.TransactionalIDPrefix, "tx"},
		{"Partitions", cfg.Partitions, int32(6)},
		{"ReplicationFactor", cfg.ReplicationFactor, int16(3)},
		{"Sarama.Version", sc.Version, sarama.V3_6_0_0},
		{"Sarama.Net.SASL.Enable", sc.Net.SASL.Enable, true},
		{"Sarama.Net.SASL.Mechanism", sc.Net.SASL.Mechanism, sarama.SASLMechanism(sarama.SASLTypeSCRAMSHA512)},
		{"Sarama.Net.SASL.User", sc.Net.SASL.User, "alice"},
		{"Sarama.Net.SASL.Password", sc.Net.SASL.Password, "s:cret"},
		{"Sarama.Net.SASL.SCRAMClientGeneratorFunc set", sc.Net.SASL.SCRAMClientGeneratorFunc != nil, true},
		{"Sarama.Net.TLS.Enable", sc.Net.TLS.Enable, true},
		{"Sarama.Net.TLS.Config.ServerName", sc.Net.TLS.Config.ServerName, "kafka.internal"},
		{"Sarama.Net.TLS.Config.InsecureSkipVerify", sc.Net.TLS.Config.InsecureSkipVerify, true},
		{"Sarama.MetricRegistry discards", sc.MetricRegistry, discardMetrics{}},
		{"tls files", x.files, tlsFiles{ca: "/ca.pem", cert: "/c.pem", key: "/k.pem"}},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// Each SASL mechanism, with its SCRAM client.
	for param, want := range map[string]sarama.SASLMechanism{"plain": sarama.SASLTypePlaintext, "scram-sha-256": sarama.SASLTypeSCRAMSHA256, "SCRAM-SHA-512": sarama.SASLTypeSCRAMSHA512} {
		cfg, err := configFromURL(mustParse(t, "kafka://u:p@h:9092?group=g&sasl="+param), brokerurl.Options{})
		if err != nil {
			t.Fatalf("sasl=%s: %v", param, err)
		}
		if cfg.Sarama.Net.SASL.Mechanism != want || cfg.Sarama.Net.TLS.Enable {
			t.Errorf("sasl=%s: mechanism %s (TLS %v), want %s without TLS", param, cfg.Sarama.Net.SASL.Mechanism, cfg.Sarama.Net.TLS.Enable, want)
		}
		if gen := cfg.Sarama.Net.SASL.SCRAMClientGeneratorFunc; (gen != nil) != (want != sarama.SASLTypePlaintext) {
			t.Errorf("sasl=%s: SCRAM client generator set = %v", param, gen != nil)
		}
	}
	// Any tls_ parameter turns TLS on.
	cfg, err = configFromURL(mustParse(t, "kafka://h:9092?group=g&tls_server_name=x"), brokerurl.Options{})
	if err != nil || !cfg.Sarama.Net.TLS.Enable {
		t.Errorf("tls_server_name alone: TLS not enabled (%v)", err)
	}
	// No security parameter: the adapter's own default configuration, as before.
	cfg, err = configFromURL(mustParse(t, "kafka://h:9092?group=g"), brokerurl.Options{})
	if err != nil || cfg.Sarama != nil {
		t.Errorf("plain URL: Sarama %v, err %v; want nil, nil", cfg.Sarama, err)
	}
	// NoConsume: no group needed.
	cfg, err = configFromURL(mustParse(t, "kafka://h:9092"), brokerurl.Options{NoConsume: true})
	if err != nil || cfg.ConsumerGroup == "" {
		t.Errorf("NoConsume without group: %q, %v", cfg.ConsumerGroup, err)
	}
}

// TestURLRefusals: unknown parameters, a missing group and bad values are named.
func TestURLRefusals(t *testing.T) {
	for _, c := range []struct {
		url   string
		is    error
		want  []string
		param string // the *brokerurl.ParameterError's Name, when it is one
	}{
		{"kafka://h:9092?group=g&tsl=true&sasl_mech=plain", brokerurl.ErrUnknownParameter, []string{"sasl_mech, tsl", "tls"}, ""},
		{"kafka://h:9092", brokerurl.ErrInvalidURL, []string{"parameter group"}, ""},
		{"kafka://?group=g", brokerurl.ErrInvalidURL, []string{"at least one broker"}, ""},
		{"kafka://h:9092?group=g&at_least_once=maybe", brokerurl.ErrInvalidURL, []string{"true or false"}, "at_least_once"},
		{"kafka://h:9092?group=g&partitions=-1", brokerurl.ErrInvalidURL, []string{"non-negative"}, "partitions"},
		{"kafka://h:9092?group=g&partitions=4294967296", brokerurl.ErrInvalidURL, []string{"at most"}, "partitions"},
		{"kafka://h:9092?group=g&replication_factor=40000", brokerurl.ErrInvalidURL, []string{"at most"}, "replication_factor"},
		{"kafka://h:9092?group=g&version=banana", brokerurl.ErrInvalidURL, []string{"Kafka version"}, "version"},
		{"kafka://h:9092?group=g&version=2.0.0", brokerurl.ErrInvalidURL, []string{"at least 2.5.0", "at_least_once=true"}, "version"},
		{"kafka://h:9092?group=g&tls=yes-please", brokerurl.ErrInvalidURL, []string{"true or false"}, "tls"},
		{"kafka://h:9092?group=g&tls_insecure_skip_verify=sure", brokerurl.ErrInvalidURL, []string{"true or false"}, "tls_insecure_skip_verify"},
		{"kafka://h:9092?group=g&tls=false&tls_ca=/ca.pem", brokerurl.ErrInvalidURL, []string{"contradicts the tls_ parameters"}, "tls"},
		{"kafka://h:9092?group=g&tls_cert=/c.pem", brokerurl.ErrInvalidURL, []string{"needs tls_key"}, "tls_cert"},
		{"kafka://h:9092?group=g&tls_key=/k.pem", brokerurl.ErrInvalidURL, []string{"needs tls_cert"}, "tls_key"},
		{"kafka://u:p@h:9092?group=g&sasl=gssapi", brokerurl.ErrInvalidURL, []string{"plain, scram-sha-256, scram-sha-512"}, "sasl"},
		{"kafka://h:9092?group=g&sasl=plain", brokerurl.ErrInvalidURL, []string{"needs the user and password"}, "sasl"},
		{"kafka://u@h:9092?group=g&sasl=scram-sha-256", brokerurl.ErrInvalidURL, []string{"needs the user and password"}, "sasl"},
		{"kafka://h:9092?group=g&version=2.0.0&at_least_once=true", nil, nil, ""},
		{"kafka://u:hunter2@h:9092?group=g", brokerurl.ErrInvalidURL, []string{"no parameter sasl"}, ""},
		{"kafka://h:9092?group=g&group=h", brokerurl.ErrInvalidURL, []string{"more than once"}, "group"},
		{"kafka://127.0.0.1:19092/orders?group=g", brokerurl.ErrInvalidURL, []string{`has a path "/orders"`, "--topic"}, ""},
		{"kafka://h:9092/orders", brokerurl.ErrInvalidURL, []string{`has a path "/orders"`}, ""},
		{"kafka://h:9092?group=g#orders", brokerurl.ErrInvalidURL, []string{`has a fragment "orders"`}, ""},
		{"kafka://h:9092#x", brokerurl.ErrInvalidURL, []string{`has a fragment "x"`}, ""},
		// An unencoded / or # in a password: the piece after it is not shown.
		{"kafka://alice:12/34hunter2@h:9092?sasl=plain", brokerurl.ErrInvalidURL, []string{"has a path,", "%2F"}, ""},
		{"kafka://alice:12#34hunter2@h:9092?sasl=plain", brokerurl.ErrInvalidURL, []string{"has a fragment (", "%23"}, ""},
		{"kafka://h:9092/?group=g", nil, nil, ""},
	} {
		_, err := configFromURL(mustParse(t, c.url), brokerurl.Options{})
		if c.is == nil {
			if err != nil {
				t.Errorf("%s: %v", c.url, err)
			}
			continue
		}
		if !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.url, err, c.is)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.url, err, w)
			}
		}
		if pe, ok := errors.AsType[*brokerurl.ParameterError](err); c.param != "" && (!ok || pe.Name != c.param) {
			t.Errorf("%s: %q is no ParameterError naming %s", c.url, err, c.param)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %q shows the password", c.url, err)
		}
	}
}

// TestURLTLSFiles: the TLS files are read when the broker is opened, not by configFromURL
// (the planner builds the Config offline), and a missing or empty file is named.
func TestURLTLSFiles(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t, dir, "files")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	open := func(q string) (Config, error) {
		cfg, _, err := openConfig(mustParse(t, "kafka://h:9092?group=g&"+q), brokerurl.Options{})
		return cfg, err
	}
	if _, err := configFromURL(mustParse(t, "kafka://h:9092?group=g&tls_ca="+missing), brokerurl.Options{}); err != nil {
		t.Errorf("configFromURL read tls_ca: %v", err)
	}
	for _, c := range []struct{ q, param, want string }{
		{"tls_ca=" + missing, "tls_ca", "no such file"},
		{"tls_ca=" + notPEM, "tls_ca", "holds no PEM certificate"},
		{"tls_cert=" + pki.client + "&tls_key=" + notPEM, "tls_cert", "private key"},
	} {
		_, err := open(c.q)
		pe, ok := errors.AsType[*brokerurl.ParameterError](err)
		if !ok || pe.Name != c.param || !strings.Contains(err.Error(), c.want) || !errors.Is(err, brokerurl.ErrInvalidURL) {
			t.Errorf("%s: %v, want a ParameterError naming %s that says %q", c.q, err, c.param, c.want)
		}
	}
	cfg, err := open("tls_ca=" + pki.ca + "&tls_cert=" + pki.client + "&tls_key=" + pki.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.Sarama.Net.TLS.Config
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.MinVersion != tls.VersionTLS12 {
		t.Errorf("TLS config: roots %v, %d certificates, min version %x", tc.RootCAs != nil, len(tc.Certificates), tc.MinVersion)
	}
	// Every client configuration the adapter derives keeps the TLS and SASL settings.
	cfg.Sarama.Net.SASL.Enable, cfg.Sarama.Net.SASL.User, cfg.Sarama.Net.SASL.Password = true, "u", "p"
	for name, sc := range map[string]*sarama.Config{"adapter": cfg.saramaConfig(), "store": StoreSaramaConfig(cfg.Sarama)} {
		if sc.Net.TLS.Config != tc || !sc.Net.TLS.Enable || !sc.Net.SASL.Enable || sc.Net.SASL.User != "u" {
			t.Errorf("%s client configuration lost the TLS or SASL settings", name)
		}
	}
}

// TestURLDeadLetterDestinations: the adapter's dead-letter topics of the cluster, sorted, with
// the dead letters the store holds (replayed ones not counted); marker topics and other
// topics are not destinations.
func TestURLDeadLetterDestinations(t *testing.T) {
	addr := testenv.Getenv("MILLRACE_KAFKA_BROKERS", "127.0.0.1:19092")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := brokerurl.OpenBroker(ctx, "kafka://"+addr, brokerurl.Options{NoConsume: true, Logger: urlTestLogger(t)})
	if err != nil {
		testenv.Unreachable(t, "Kafka", addr, "MILLRACE_KAFKA_BROKERS", err)
	}
	defer b.Close()
	prefix := fmt.Sprintf("dests%08x", rand.Uint32())
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}
	for _, topic := range []string{prefix + ".b", prefix + ".a"} {
		if err := b.Adapter().Provision(ctx, topic, policy); err != nil {
			t.Fatalf("Provision %s: %v", topic, err)
		}
	}
	s, err := b.DeadLetters(ctx, prefix+".a.dlq")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		id, err := s.Put(ctx, storetest.Sample(i, prefix+".a", deadletter.Exhausted))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := s.Delete(ctx, ids[1]); err != nil { // creates the marker topic prefix.a.dlq.replayed
		t.Fatal(err)
	}
	_ = s.Close()

	dests, err := b.DeadLetterDestinations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(dests, func(x, y brokerurl.Destination) int { return strings.Compare(x.Name, y.Name) }) {
		t.Errorf("destinations not sorted by name: %v", dests)
	}
	var mine []brokerurl.Destination
	for _, d := range dests {
		if strings.HasPrefix(d.Name, prefix) {
			mine = append(mine, d)
		}
	}
	want := []brokerurl.Destination{
		{Name: prefix + ".a.dlq", Topic: prefix + ".a", Depth: 2},
		{Name: prefix + ".b.dlq", Topic: prefix + ".b", Depth: 0},
	}
	if !slices.Equal(mine, want) {
		t.Fatalf("destinations %+v, want %+v", mine, want)
	}
}
