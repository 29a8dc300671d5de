package redisstream

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// mustURL parses raw or fails the test.
func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// testBrokerURL is the test Redis's URL with query q added.
func testBrokerURL(t *testing.T, q string) string {
	t.Helper()
	u := mustURL(t, redisURL())
	if u.RawQuery != "" && q != "" {
		q = u.RawQuery + "&" + q
	} else if q == "" {
		q = u.RawQuery
	}
	u.RawQuery = q
	return u.String()
}

// Each millrace parameter reaches the Config field of the same meaning, and none is left in
// the URL go-redis gets.
func TestURLParams(t *testing.T) {
	for _, tc := range []struct {
		query string
		check func(Config) bool
	}{
		{"group=billing", func(c Config) bool { return c.Group == "billing" }},
		{"consumer=worker-1", func(c Config) bool { return c.Consumer == "worker-1" }},
		{"window=8", func(c Config) bool { return c.Window == 8 }},
		{"processing_budget=45s", func(c Config) bool { return c.ProcessingBudget == 45*time.Second }},
		{"min_idle=2m", func(c Config) bool { return c.MinIdle == 2*time.Minute }},
		{"reclaim_interval=250ms", func(c Config) bool { return c.ReclaimInterval == 250*time.Millisecond }},
		{"max_len=10000", func(c Config) bool { return c.MaxLen == 10000 }},
		{"dlq_suffix=.dead", func(c Config) bool { return c.DeadLetterStream != nil && c.DeadLetterStream("s") == "s.dead" }},
	} {
		t.Run(tc.query, func(t *testing.T) {
			q := tc.query
			if !strings.HasPrefix(q, "group=") {
				q += "&group=g"
			}
			cfg, err := configFromURL(mustURL(t, "redis://127.0.0.1:6379/2?"+q), brokerurl.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Errorf("%s: config %+v", tc.query, cfg)
			}
			if cfg.URL != "redis://127.0.0.1:6379/2" {
				t.Errorf("Config.URL = %q, want the URL without millrace's parameters", cfg.URL)
			}
			if cfg.Logger == nil {
				t.Error("Config.Logger is nil: the adapter would log to slog.Default")
			}
		})
	}
}

// go-redis's own options pass through to go-redis, and every name the driver passes on is one
// go-redis still takes (a go-redis upgrade that drops one fails here).
func TestURLGoRedisParams(t *testing.T) {
	cfg, err := configFromURL(mustURL(t, "redis://u:pw@127.0.0.1:6379/3?group=g&dial_timeout=3s&pool_size=7&window=4"), brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", cfg.URL, err)
	}
	if opts.DialTimeout != 3*time.Second || opts.PoolSize != 7 || opts.DB != 3 || opts.Password != "pw" || cfg.Window != 4 {
		t.Errorf("DialTimeout %v PoolSize %d DB %d Password %q Window %d: want 3s 7 3 pw 4", opts.DialTimeout, opts.PoolSize, opts.DB, opts.Password, cfg.Window)
	}
	values := map[string]string{"client_name": "x", "pool_fifo": "true", "skip_verify": "true", "protocol": "3"}
	for _, name := range goRedisParams {
		v, ok := values[name]
		if !ok {
			v = "2"
		}
		if _, err := configFromURL(mustURL(t, "rediss://127.0.0.1:6379?group=g&"+name+"="+v), brokerurl.Options{}); err != nil {
			t.Errorf("%s=%s: %v", name, v, err)
		}
	}
}

// An unknown parameter gives one error naming it once, wrapping ErrUnknownParameter, with the
// parameters the scheme takes; nothing of go-redis's own wording ("unexpected option").
func TestURLUnknownParameter(t *testing.T) {
	_, err := brokerurl.OpenAdapter(context.Background(), "redis://127.0.0.1:1/0?group=g&foo=bar", brokerurl.Options{})
	if !errors.Is(err, brokerurl.ErrUnknownParameter) {
		t.Fatalf("err = %v, want ErrUnknownParameter (and no connection attempt)", err)
	}
	var ue *brokerurl.UnknownParameterError
	if !errors.As(err, &ue) || !slices.Equal(ue.Names, []string{"foo"}) {
		t.Fatalf("err = %#v, want an UnknownParameterError naming foo", err)
	}
	msg := err.Error()
	t.Log(msg)
	want := `redis:// does not take foo (it takes consumer, dlq_suffix, group, max_len, min_idle, processing_budget, reclaim_interval, window; and go-redis's client_name, `
	if !strings.HasPrefix(msg, want) {
		t.Errorf("message\n%s\nwant it to start\n%s", msg, want)
	}
	for _, bad := range []string{"unexpected", "redis: ", "bar", "brokerurl"} {
		if strings.Contains(msg, bad) {
			t.Errorf("message %q holds %q", msg, bad)
		}
	}
	if strings.Count(msg, "foo") != 1 || strings.Count(msg, "dial_timeout") != 1 {
		t.Errorf("message %q: want foo and dial_timeout named once each", msg)
	}
}

// Bad values name the parameter and the rule, whoever checks them (millrace or go-redis).
func TestURLBadValues(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{"group=g&window=x", `redis:// parameter window="x" must be a non-negative integer`},
		{"group=g&processing_budget=-1s", `redis:// parameter processing_budget="-1s" must be a non-negative duration`},
		{"group=g&group=h", `redis:// parameter group="g,h" is given more than once`},
		{"group=g&dial_timeout=2s&dial_timeout=3s", `redis:// parameter dial_timeout="2s,3s" is given more than once`},
		{"group=g&dial_timeout=soon", `redis:// parameter dial_timeout="soon" must be a duration such as 5s or 500ms, or a number of seconds`},
		{"group=g&dial_timeout=abc", `redis:// parameter dial_timeout="abc" must be a duration`},
		{"group=g&conn_max_idle_time=1.5", `redis:// parameter conn_max_idle_time="1.5" must be a duration`},
		{"group=g&pool_size=many", `redis:// parameter pool_size="many" must be an integer`},
		{"group=g&max_retries=1s", `redis:// parameter max_retries="1s" must be an integer`},
		{"group=g&pool_fifo=yes", `redis:// parameter pool_fifo="yes" must be true, false, 1 or 0`},
		{"group=g&protocol=4", `redis:// parameter protocol="4" must be 2 or 3 (RESP2 or RESP3)`},
		{"group=g&db=x", `redis:// parameter db="x" must be a database number`},
		{"group=g&db=-1", `redis:// parameter db="-1" must be a database number`},
		{"group=g&skip_verify=true", `redis:// parameter skip_verify="true" applies to rediss:// (TLS) only`},
		{"group=g&processing_budget=10s&min_idle=5s", `redis:// parameter min_idle="5s" (redisstream.Config.MinIdle) must be at least processing_budget (10s)`},
		{"group=g&dlq_suffix=", `redis:// parameter dlq_suffix="" must not be empty`},
	} {
		_, err := urlConfig(mustURL(t, "redis://127.0.0.1:6379?"+tc.query), brokerurl.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to hold %q", tc.query, err, tc.want)
		}
		var pe *brokerurl.ParameterError
		if !errors.Is(err, brokerurl.ErrInvalidURL) || !errors.As(err, &pe) || strings.Contains(err.Error(), "redis: ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err = %v, want one line, a *brokerurl.ParameterError (ErrInvalidURL), none of go-redis's words", tc.query, err)
		}
	}
	// A refusal of Config.Validate is still an invalid configuration; opening names the parameter.
	_, err := brokerurl.OpenAdapter(context.Background(), "redis://127.0.0.1:1?group=g&processing_budget=10s&min_idle=5s", brokerurl.Options{})
	if !errors.Is(err, millrace.ErrInvalidConfig) || !errors.Is(err, brokerurl.ErrInvalidURL) || !strings.Contains(err.Error(), `parameter min_idle="5s"`) {
		t.Errorf("OpenAdapter, min_idle below processing_budget: %v, want the parameter's error, ErrInvalidConfig too", err)
	}
	for _, tc := range []struct{ url, want string }{
		{"redis://127.0.0.1:6379/x?group=g", `redis:// path "/x" must be one database number`},
		{"redis://127.0.0.1:6379/0/1?group=g", `redis:// path "/0/1" must be one database number`},
		{"redis://127.0.0.1:6379/0?group=g#main", `redis:// takes no fragment ("#main")`},
	} {
		_, err := urlConfig(mustURL(t, tc.url), brokerurl.Options{})
		if !errors.Is(err, brokerurl.ErrInvalidURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrInvalidURL saying %q", tc.url, err, tc.want)
		}
	}
}

// The database is named once: db and a database in the path together are refused, naming
// both, whatever their values; either alone is taken.
func TestURLDatabaseOnce(t *testing.T) {
	for _, raw := range []string{"redis://127.0.0.1:6379/0?group=g&db=1", "redis://127.0.0.1:6379/1?group=g&db=1", "rediss://127.0.0.1:6379/3?db=0&group=g"} {
		_, err := urlConfig(mustURL(t, raw), brokerurl.Options{})
		var pe *brokerurl.ParameterError
		if !errors.As(err, &pe) || pe.Name != "db" || !strings.Contains(err.Error(), `parameter db="`) || !strings.Contains(err.Error(), "path's database /") {
			t.Errorf("%s: %v, want a *brokerurl.ParameterError naming db and the path's database", raw, err)
		}
	}
	for raw, want := range map[string]int{
		"redis://127.0.0.1:6379/2?group=g": 2, "redis://127.0.0.1:6379?group=g&db=3": 3, "redis://127.0.0.1:6379/?group=g&db=4": 4,
		"redis://127.0.0.1:6379/5?group=g&db=": 5,
	} {
		cfg, err := urlConfig(mustURL(t, raw), brokerurl.Options{})
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if opts, err := redis.ParseURL(cfg.URL); err != nil || opts.DB != want {
			t.Errorf("%s: database %v (%v), want %d", raw, opts, err, want)
		}
	}
}

// goRedisValue accepts exactly what go-redis accepts for each of its options (but db and
// protocol, held to what the server takes): a go-redis upgrade that reads an option otherwise
// fails here.
func TestURLGoRedisValues(t *testing.T) {
	probes := []string{"", "2", "0", "-1", "3s", "250ms", "-2s", "1.5", "true", "false", "1", "yes", "x", "2h45m", " 2"}
	for _, name := range goRedisParams {
		if name == "db" || name == "protocol" {
			continue
		}
		for _, v := range probes {
			ours := goRedisValue("rediss", name, v)
			_, theirs := redis.ParseURL("rediss://127.0.0.1:6379?" + url.Values{name: {v}}.Encode())
			if (ours == nil) != (theirs == nil) {
				t.Errorf("%s=%q: millrace says %v, go-redis %v", name, v, ours, theirs)
			}
		}
	}
}

// A consumer needs a group; a broker opened only to publish and read dead letters does not.
func TestURLGroupRequired(t *testing.T) {
	_, err := configFromURL(mustURL(t, "redis://127.0.0.1:6379"), brokerurl.Options{})
	if !errors.Is(err, brokerurl.ErrInvalidURL) || !strings.Contains(err.Error(), "needs parameter group") {
		t.Errorf("no group: err = %v, want ErrInvalidURL naming group", err)
	}
	cfg, err := configFromURL(mustURL(t, "redis://127.0.0.1:6379"), brokerurl.Options{NoConsume: true})
	if err != nil || cfg.Group == "" {
		t.Errorf("no group, NoConsume: group %q, err %v; want accepted", cfg.Group, err)
	}
}

// envURLChild makes the test binary, run by TestURLUnreachable, open an unreachable Redis.
const envURLChild = "MILLRACE_TEST_URL_CHILD"

// An unreachable server fails with one error; once the driver's client logs are silenced (as
// the CLI does, through the Mux), go-redis prints nothing to the process's stderr, where its
// default logger writes. The open runs in a child process so that the real default logger and
// the real stderr are what is checked; the child that does not silence shows go-redis does
// print there, so the silenced run's empty stderr means something.
func TestURLUnreachable(t *testing.T) {
	if mode := os.Getenv(envURLChild); mode != "" {
		if mode == "silence" {
			brokerurl.DefaultMux().SilenceClientLogs()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := brokerurl.OpenBroker(ctx, "redis://127.0.0.1:1/0?dial_timeout=1s", brokerurl.Options{NoConsume: true})
		if err == nil {
			_ = b.Close()
			os.Stdout.WriteString("opened\n")
			return
		}
		os.Stdout.WriteString(err.Error() + "\n")
		return
	}
	run := func(mode string) (stdout, stderr string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestURLUnreachable$", "-test.count=1")
		cmd.Env = append(os.Environ(), envURLChild+"="+mode)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("child %s: %v\nstdout: %s\nstderr: %s", mode, err, out.String(), errOut.String())
		}
		// The test binary adds "PASS" to stdout; the child's own line comes first.
		return strings.TrimSuffix(strings.TrimSpace(out.String()), "PASS"), errOut.String()
	}
	_, loud := run("loud")
	if !strings.Contains(loud, "redis:") {
		t.Fatalf("without SilenceClientLogs go-redis printed %q to stderr; want its dial failure there (else this test checks nothing)", loud)
	}
	t.Logf("not silenced, stderr:\n%s", loud)
	stdout, stderr := run("silence")
	t.Logf("silenced, stdout: %s", stdout)
	if stderr != "" {
		t.Errorf("silenced: stderr = %q, want nothing", stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "connect to redis://127.0.0.1:1/0") || !strings.Contains(lines[0], "connection refused") {
		t.Errorf("silenced: stdout = %q, want one line: connect to redis://127.0.0.1:1/0...: ...connection refused", stdout)
	}
}

// openTestBroker opens the test Redis as the CLI does.
func openTestBroker(t *testing.T) brokerurl.Broker {
	t.Helper()
	testClient(t) // skips (fails in CI) when Redis is down
	b, err := brokerurl.OpenBroker(context.Background(), testBrokerURL(t, ""), brokerurl.Options{NoConsume: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// A dead-letter stream that does not exist is ErrDestinationNotFound, in the words every broker
// uses; so is a key that is no stream. TopicExists tells a stream from a missing or other key.
func TestURLDeadLettersMissing(t *testing.T) {
	b := openTestBroker(t)
	c := testClient(t)
	ctx := context.Background()
	name := uniqueStream(t) + ".dlq"
	_, err := b.DeadLetters(ctx, name)
	if !errors.Is(err, deadletter.ErrDestinationNotFound) {
		t.Fatalf("err = %v, want ErrDestinationNotFound", err)
	}
	want := `dead-letter stream "` + name + `" does not exist (Redis creates it with its first dead letter: none was written there)`
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
	if err := c.Set(ctx, name, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), name) })
	if _, err := b.DeadLetters(ctx, name); !errors.Is(err, deadletter.ErrDestinationNotFound) || !strings.Contains(err.Error(), "the key is a string, not a stream") {
		t.Errorf("string key: err = %v, want ErrDestinationNotFound saying it is a string", err)
	}
	if ok, err := b.TopicExists(ctx, name); ok || err != nil {
		t.Errorf("TopicExists(string key) = %v, %v; want false", ok, err)
	}
	topic := uniqueStream(t)
	if ok, err := b.TopicExists(ctx, topic); ok || err != nil {
		t.Errorf("TopicExists(missing) = %v, %v; want false", ok, err)
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []string{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), topic) })
	if ok, err := b.TopicExists(ctx, topic); !ok || err != nil {
		t.Errorf("TopicExists(stream) = %v, %v; want true", ok, err)
	}
	// Through OpenStore, the destination of a topic.
	if _, err := brokerurl.OpenStore(ctx, testBrokerURL(t, ""), brokerurl.StoreOptions{Topic: topic}); !errors.Is(err, deadletter.ErrDestinationNotFound) || !strings.Contains(err.Error(), `"`+topic+`.dlq"`) {
		t.Errorf("OpenStore(topic without dead letters): err = %v, want ErrDestinationNotFound naming %s.dlq", err, topic)
	}
}

// DeadLetterDestinations lists the <stream>.dlq streams with their lengths, sorted, and leaves
// out keys named *.dlq that are not streams and streams not named so.
func TestURLDeadLetterDestinations(t *testing.T) {
	b := openTestBroker(t)
	c := testClient(t)
	ctx := context.Background()
	prefix := uniqueStream(t)
	keys := []string{prefix + ".b.dlq", prefix + ".a.dlq", prefix + ".work", prefix + ".list.dlq", prefix + ".hash.dlq"}
	t.Cleanup(func() { c.Del(context.Background(), keys...) })
	for i, n := range map[string]int{keys[0]: 1, keys[1]: 3, keys[2]: 2} {
		for range n {
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: i, Values: []string{"k", "v"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.RPush(ctx, keys[3], "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, keys[4], "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	all, err := b.DeadLetterDestinations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []brokerurl.Destination
	for _, d := range all {
		if strings.HasPrefix(d.Name, prefix) {
			got = append(got, d)
		}
	}
	want := []brokerurl.Destination{
		{Name: prefix + ".a.dlq", Topic: prefix + ".a", Depth: 3},
		{Name: prefix + ".b.dlq", Topic: prefix + ".b", Depth: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("destinations\n%+v\nwant\n%+v", got, want)
	}
	if !slices.IsSortedFunc(all, func(a, b brokerurl.Destination) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("destinations are not sorted by name")
	}

	// With dlq_suffix, streams so named; the suffix is matched literally, not as a pattern.
	custom := []string{prefix + ".c.d*", prefix + ".d.dxx"}
	t.Cleanup(func() { c.Del(context.Background(), custom...) })
	for _, k := range custom {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []string{"k", "v"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b2, err := brokerurl.OpenBroker(ctx, testBrokerURL(t, "dlq_suffix="+url.QueryEscape(".d*")), brokerurl.Options{NoConsume: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	all, err = b2.DeadLetterDestinations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, d := range all {
		if strings.HasPrefix(d.Name, prefix) {
			got = append(got, d)
		}
	}
	want = []brokerurl.Destination{{Name: prefix + ".c.d*", Topic: prefix + ".c", Depth: 1}}
	if !slices.Equal(got, want) {
		t.Errorf("dlq_suffix=.d*: destinations\n%+v\nwant\n%+v", got, want)
	}
}
