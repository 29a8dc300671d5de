package sqs

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
	"github.com/millrace/millrace/internal/testenv"
)

func mustParseURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestURLParametersReachConfig: each parameter sets its Config field; the defaults of each
// scheme.
func TestURLParametersReachConfig(t *testing.T) {
	cfg, err := configFromURL(mustParseURL(t, "sqs+https://sqs.eu-west-1.amazonaws.com?region=eu-central-1&visibility=90s"+
		"&processing_budget=80s&give_up=redrive&create=true&dlq_suffix=_dead&wait_time=5s&window=8&pollers=3"), brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"Endpoint", cfg.Endpoint, "https://sqs.eu-west-1.amazonaws.com"},
		{"Region", cfg.Region, "eu-central-1"},
		{"VisibilityTimeout", cfg.VisibilityTimeout, 90 * time.Second},
		{"ProcessingBudget", cfg.ProcessingBudget, 80 * time.Second},
		{"GiveUp", cfg.GiveUp, GiveUpRedrive},
		{"CreateQueues", cfg.CreateQueues, true},
		{"DeadLetterSuffix", cfg.DeadLetterSuffix, "_dead"},
		{"WaitTime", cfg.WaitTime, 5 * time.Second},
		{"Window", cfg.Window, 8},
		{"Pollers", cfg.Pollers, 3},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	cfg, err = configFromURL(mustParseURL(t, "sqs+https://sqs.ap-south-1.amazonaws.com?processing_budget=10s"), brokerurl.Options{})
	if err != nil || cfg.Region != "ap-south-1" || cfg.CreateQueues || cfg.GiveUp != GiveUpSend {
		t.Errorf("sqs+https defaults: region %q, create %v, give_up %v (%v); want the host's region, false, send", cfg.Region, cfg.CreateQueues, cfg.GiveUp, err)
	}
	cfg, err = configFromURL(mustParseURL(t, "sqs+http://127.0.0.1:19324?processing_budget=10s"), brokerurl.Options{})
	if err != nil || cfg.Endpoint != "http://127.0.0.1:19324" || cfg.Region != "us-east-1" || !cfg.CreateQueues {
		t.Errorf("sqs+http defaults: endpoint %q, region %q, create %v (%v)", cfg.Endpoint, cfg.Region, cfg.CreateQueues, err)
	}
	cfg, err = configFromURL(mustParseURL(t, "sqs+http://127.0.0.1:19324"), brokerurl.Options{NoConsume: true})
	if err != nil || cfg.ProcessingBudget <= 0 {
		t.Errorf("NoConsume without processing_budget: %v, %v", cfg.ProcessingBudget, err)
	}
}

// TestURLRefusals: unknown parameters, a missing processing_budget and bad values are named.
func TestURLRefusals(t *testing.T) {
	for _, c := range []struct {
		url  string
		is   error
		want []string
	}{
		{"sqs+http://h:1?processing_budget=1s&visiblity=60s&aws_access_key_id=x", brokerurl.ErrUnknownParameter, []string{"aws_access_key_id, visiblity", "visibility"}},
		{"sqs+http://h:1", brokerurl.ErrInvalidURL, []string{"parameter processing_budget"}},
		{"sqs+https://sqs.eu-west-1.amazonaws.com?visibility=60s", brokerurl.ErrInvalidURL, []string{"sqs+https://", "parameter processing_budget"}},
		{"sqs+http://?processing_budget=1s", brokerurl.ErrInvalidURL, []string{"host"}},
		{"sqs+http://h:1?processing_budget=soon", brokerurl.ErrInvalidURL, []string{"processing_budget", "duration"}},
		{"sqs+http://h:1?processing_budget=1s&visibility=-3s", brokerurl.ErrInvalidURL, []string{"visibility", "duration"}},
		{"sqs+http://h:1?processing_budget=1s&wait_time=x", brokerurl.ErrInvalidURL, []string{"wait_time"}},
		{"sqs+http://h:1?processing_budget=1s&create=perhaps", brokerurl.ErrInvalidURL, []string{"create", "true or false"}},
		{"sqs+http://h:1?processing_budget=1s&give_up=never", brokerurl.ErrInvalidURL, []string{"give_up", "send, redrive"}},
		{"sqs+http://h:1?processing_budget=104s&visibility=60s", millrace.ErrInvalidConfig, []string{`sqs+http:// parameter processing_budget="104s" (sqs.Config.ProcessingBudget) must be at most visibility (1m0s) minus 1s`}},
		{"sqs+http://h:1?processing_budget=1s&dlq_suffix=.dead", millrace.ErrInvalidConfig, []string{`sqs+http:// parameter dlq_suffix=".dead" (sqs.Config.DeadLetterSuffix) may hold only letters`}},
		{"sqs+http://h:1?processing_budget=1s&wait_time=30s", millrace.ErrInvalidConfig, []string{`sqs+http:// parameter wait_time="30s" (sqs.Config.WaitTime) must be whole seconds, at most 20s`}},
		{"sqs+http://h:1?processing_budget=1s&visibility=61.5s", millrace.ErrInvalidConfig, []string{`sqs+http:// parameter visibility="61.5s" (sqs.Config.VisibilityTimeout) must be whole seconds between 1s and 12h`}},
		{"sqs+http://h:1?processing_budget=1s&visibility=13h", brokerurl.ErrInvalidURL, []string{`sqs+http:// parameter visibility="13h" (sqs.Config.VisibilityTimeout) must be whole seconds between 1s and 12h`}},
		// The rule names the other field by its parameter, here at its default (60s).
		{"sqs+http://h:1?processing_budget=60s", brokerurl.ErrInvalidURL, []string{`sqs+http:// parameter processing_budget="60s" (sqs.Config.ProcessingBudget) must be at most visibility (1m0s)`}},
		{"sqs+http://h:1?processing_budget=1s&window=4&pollers=5", millrace.ErrInvalidConfig, []string{`sqs+http:// parameter pollers="5" (sqs.Config.Pollers) must be at most window (4)`}},
		{"sqs+http://h:1?processing_budget=1s&window=2000", millrace.ErrInvalidConfig, []string{`sqs+http:// parameter window="2000" (sqs.Config.Window) must be between 1 and 1024`}},
		{"sqs+http://h:1?processing_budget=1s&window=many", brokerurl.ErrInvalidURL, []string{"window"}},
		{"sqs+http://h:1?processing_budget=1s&region=a&region=b", brokerurl.ErrInvalidURL, []string{"region", "more than once"}},
	} {
		_, err := urlConfig(mustParseURL(t, c.url), brokerurl.Options{})
		if !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.url, err, c.is)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.url, err, w)
			}
		}
		// A value Config.Validate refuses is the parameter's error too (exit status 2 in the CLI),
		// naming the parameter; the Config field only as the one it sets.
		if errors.Is(err, millrace.ErrInvalidConfig) {
			var pe *brokerurl.ParameterError
			if !errors.As(err, &pe) || !errors.Is(err, brokerurl.ErrInvalidURL) || strings.Count(err.Error(), "sqs.Config.") != 1 ||
				strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %v, want one line, a *brokerurl.ParameterError naming the parameter, wrapping ErrInvalidURL", c.url, err)
			}
		}
	}
}

// TestURLPartsRefused: the parts of a URL SQS has no use for are refused, one line naming the
// part, never showing the user info: a path (a queue URL given as the broker's), user info
// (credentials come from the SDK's chain), a fragment.
func TestURLPartsRefused(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"sqs+http://127.0.0.1:19324/000000000000/orders?processing_budget=1s", `sqs+http:// takes no path ("/000000000000/orders")`},
		{"sqs+https://127.0.0.1:1/123456789012/orders?processing_budget=1s", `sqs+https:// takes no path`},
		{"sqs+http://AKIA:secret@127.0.0.1:19324?processing_budget=1s", `sqs+http:// takes no user info (user:password@) in the URL: credentials come from the AWS SDK's default chain`},
		{"sqs+https://AKIA@127.0.0.1:1?processing_budget=1s", `sqs+https:// takes no user info`},
		{"sqs+http://127.0.0.1:19324?processing_budget=1s#orders", `sqs+http:// takes no fragment ("#orders")`},
	} {
		// Should the part be ignored, the open must not reach beyond loopback (hosts are
		// 127.0.0.1; the credential chain is the environment's static keys, no IMDS).
		useProfile(t, nil)
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTESTPARTS0000000")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
		t.Setenv("AWS_CA_BUNDLE", "")
		for _, adapter := range []bool{false, true} {
			var (
				opened interface{ Close() error }
				err    error
			)
			if adapter {
				opened, err = brokerurl.OpenAdapter(context.Background(), c.url, brokerurl.Options{})
			} else {
				opened, err = brokerurl.OpenBroker(context.Background(), c.url, brokerurl.Options{NoConsume: true})
			}
			if err == nil {
				_ = opened.Close()
			}
			if !errors.Is(err, brokerurl.ErrInvalidURL) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want ErrInvalidURL saying %q", c.url, err, c.want)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, "secret") || strings.Contains(msg, "AKIA") || strings.Contains(msg, "\n") {
				t.Errorf("%s: %q shows the user info or is not one line", c.url, msg)
			}
		}
	}
	// Opening names a parameter Config.Validate refuses (no connection is made).
	_, err := brokerurl.OpenAdapter(context.Background(), "sqs+http://127.0.0.1:1?processing_budget=1s&visibility=61.5s", brokerurl.Options{})
	if !errors.Is(err, millrace.ErrInvalidConfig) || !errors.Is(err, brokerurl.ErrInvalidURL) || !strings.Contains(err.Error(), `parameter visibility="61.5s"`) {
		t.Errorf("OpenAdapter, visibility=61.5s: %v, want the parameter's error, ErrInvalidConfig too", err)
	}
	for _, ok := range []string{"sqs+http://127.0.0.1:19324/?processing_budget=1s", "sqs+http://127.0.0.1:19324?processing_budget=1s"} {
		if _, err := configFromURL(mustParseURL(t, ok), brokerurl.Options{}); err != nil {
			t.Errorf("%s: %v, want accepted", ok, err)
		}
	}
}

// fakeSQS answers, over TLS on loopback, the SQS JSON-protocol calls Open and
// DeadLetterDestinations make (ListQueues in pages of two, GetQueueUrl, GetQueueAttributes),
// and records the Authorization header of each request.
type fakeSQS struct {
	srv    *httptest.Server
	mu     sync.Mutex
	auth   []string
	queues []string          // every queue, in ListQueues order
	depth  map[string][2]int // visible, not visible
	faults map[string]fault  // by operation: the error it answers instead
}

// fault is an SQS error answer in the JSON protocol: the HTTP status, the __type of the body
// and, when not empty, the AWS query protocol's code in the x-amzn-query-error header (as SQS
// sends it for its query-compatible clients).
type fault struct {
	status         int
	typ, queryCode string
}

func newFakeSQS(t *testing.T, queues []string, depth map[string][2]int) *fakeSQS {
	f := &fakeSQS{queues: queues, depth: depth}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSQS) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	var in map[string]any
	_ = json.NewDecoder(r.Body).Decode(&in)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	qurl := func(name string) string { return f.srv.URL + "/000000000000/" + name }
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if fl, ok := f.faults[op]; ok {
		if fl.queryCode != "" {
			w.Header().Set("x-amzn-query-error", fl.queryCode+";Sender")
		}
		w.WriteHeader(fl.status)
		_, _ = fmt.Fprintf(w, `{"__type":%q,"message":"User: arn:aws:iam::000000000000:user/consumer is not allowed %s"}`, fl.typ, op)
		return
	}
	var out any
	switch op {
	case "ListQueues":
		start := 0
		if tok, _ := in["NextToken"].(string); tok != "" {
			_, _ = fmt.Sscan(tok, &start)
		}
		end := min(start+2, len(f.queues))
		page := map[string]any{"QueueUrls": []string{}}
		var urls []string
		for _, q := range f.queues[start:end] {
			urls = append(urls, qurl(q))
		}
		if urls != nil {
			page["QueueUrls"] = urls
		}
		if end < len(f.queues) {
			page["NextToken"] = fmt.Sprint(end)
		}
		out = page
	case "GetQueueUrl":
		name, _ := in["QueueName"].(string)
		if !slices.Contains(f.queues, name) {
			w.Header().Set("x-amzn-query-error", "AWS.SimpleQueueService.NonExistentQueue;Sender")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"no such queue"}`)
			return
		}
		out = map[string]string{"QueueUrl": qurl(name)}
	case "GetQueueAttributes":
		u, _ := in["QueueUrl"].(string)
		d := f.depth[u[strings.LastIndexByte(u, '/')+1:]]
		out = map[string]any{"Attributes": map[string]string{
			"ApproximateNumberOfMessages": fmt.Sprint(d[0]), "ApproximateNumberOfMessagesNotVisible": fmt.Sprint(d[1]),
		}}
	default:
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"__type":"com.amazonaws.sqs#InvalidAction","message":"fake SQS does not answer %s"}`, op)
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}

// lastAuth returns the last request's Authorization header.
func (f *fakeSQS) lastAuth() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auth) == 0 {
		return ""
	}
	return f.auth[len(f.auth)-1]
}

// useProfile points the SDK's default chain at a temporary shared config and credentials file
// whose profile millrace-test (chosen by AWS_PROFILE, not the default one) has its own key and
// region, trusting caPEM (AWS_CA_BUNDLE); every other AWS_* source is cleared for the test.
func useProfile(t *testing.T, caPEM []byte) {
	dir := t.TempDir()
	for _, v := range []string{
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION",
		"AWS_DEFAULT_REGION", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ENDPOINT_URL",
		"AWS_ENDPOINT_URL_SQS", "AWS_SDK_LOAD_CONFIG",
	} {
		t.Setenv(v, "")
		_ = os.Unsetenv(v)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", write("credentials", "[default]\naws_access_key_id = AKIDDEFAULTPROFILE00\naws_secret_access_key = default-secret\n\n"+
		"[millrace-test]\naws_access_key_id = AKIDMILLRACEPROFILE1\naws_secret_access_key = profile-secret\n"))
	t.Setenv("AWS_CONFIG_FILE", write("config", "[default]\nregion = us-west-2\n\n[profile millrace-test]\nregion = eu-west-3\n"))
	t.Setenv("AWS_PROFILE", "millrace-test")
	t.Setenv("AWS_CA_BUNDLE", write("ca.pem", string(caPEM)))
	// Never ask the EC2 metadata service (not a loopback address) for anything.
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// TestURLCredentialsFromProfile: sqs+https:// signs with the SDK's default chain, here a named
// profile of the shared files, and trusts AWS_CA_BUNDLE; the region comes from the profile
// unless the URL names one.
func TestURLCredentialsFromProfile(t *testing.T) {
	f := newFakeSQS(t, []string{"orders", "orders-dlq"}, nil)
	useProfile(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}))
	host := strings.TrimPrefix(f.srv.URL, "https://")
	for _, c := range []struct{ query, region string }{
		{"", "eu-west-3"},
		{"&region=ap-south-1", "ap-south-1"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, err := brokerurl.OpenBroker(ctx, "sqs+https://"+host+"?processing_budget=2s&visibility=3s"+c.query, brokerurl.Options{})
		cancel()
		if err != nil {
			t.Fatalf("open%s: %v", c.query, err)
		}
		_ = b.Close()
		auth := f.lastAuth()
		if !strings.Contains(auth, "Credential=AKIDMILLRACEPROFILE1/") || !strings.Contains(auth, "/"+c.region+"/sqs/aws4_request") {
			t.Errorf("open%s: Authorization %q, want the profile's key AKIDMILLRACEPROFILE1 and region %s", c.query, auth, c.region)
		}
	}
}

// TestURLDeadLetterDestinationsPages: every ListQueues page is read; only the dead-letter
// queues are listed, sorted, with visible and in-flight messages counted, approximately.
func TestURLDeadLetterDestinationsPages(t *testing.T) {
	f := newFakeSQS(t, []string{"zeta-dlq", "orders", "orders-dlq", "alpha", "alpha-dlq", "-dlq", "beta-dlq-not", "mid-dlq"},
		map[string][2]int{"zeta-dlq": {1, 0}, "orders-dlq": {3, 2}, "alpha-dlq": {0, 0}, "mid-dlq": {0, 4}})
	useProfile(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := brokerurl.OpenBroker(ctx, "sqs+https://"+strings.TrimPrefix(f.srv.URL, "https://"), brokerurl.Options{NoConsume: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := b.DeadLetterDestinations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []brokerurl.Destination{
		{Name: "alpha-dlq", Topic: "alpha", Depth: 0, Approximate: true},
		{Name: "mid-dlq", Topic: "mid", Depth: 4, Approximate: true},
		{Name: "orders-dlq", Topic: "orders", Depth: 5, Approximate: true},
		{Name: "zeta-dlq", Topic: "zeta", Depth: 1, Approximate: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("destinations\n %+v\nwant\n %+v", got, want)
	}
}

// localEndpoint returns fauxqs's endpoint (.ci/services/sqs.sh), failing in CI without it.
func localEndpoint(t *testing.T) *url.URL {
	ep := os.Getenv("MILLRACE_SQS_ENDPOINT")
	if ep == "" {
		testenv.Unreachable(t, "SQS", "(no endpoint)", "MILLRACE_SQS_ENDPOINT", errors.New("not set; `. .ci/services/sqs.sh` starts fauxqs and sets it"))
	}
	return mustParseURL(t, ep)
}

// TestURLLocalEndpointDeadLetterDestinations: sqs+http:// against fauxqs: provisions, publishes,
// and lists the dead-letter queues with messages in flight counted.
func TestURLLocalEndpointDeadLetterDestinations(t *testing.T) {
	ep := localEndpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := brokerurl.OpenBroker(ctx, "sqs+http://"+ep.Host+"?processing_budget=2s&visibility=3s&wait_time=1s", brokerurl.Options{Logger: logger})
	if err != nil {
		testenv.Unreachable(t, "SQS", ep.String(), "MILLRACE_SQS_ENDPOINT", err)
	}
	defer b.Close()
	a := b.Adapter().(*Adapter)
	prefix := fmt.Sprintf("dests%08x", rand.Uint32())
	topics := []string{prefix + ".b", prefix + ".a"}
	for _, topic := range topics {
		if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}); err != nil {
			t.Fatalf("Provision %s: %v", topic, err)
		}
	}
	t.Cleanup(func() { deleteQueues(t, a, prefix+"-a", prefix+"-a-dlq", prefix+"-b", prefix+"-b-dlq") })
	if ok, err := b.TopicExists(ctx, prefix+".a"); !ok || err != nil {
		t.Fatalf("TopicExists: %v, %v", ok, err)
	}
	if err := a.Publisher().Publish(prefix+".a", message.NewMessage("m1", []byte("work"))); err != nil {
		t.Fatal(err)
	}
	// Two dead letters in a's queue, held in flight by the store (received, not deleted).
	s, err := b.DeadLetters(ctx, a.DeadLetterTopic(prefix+".a"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		if _, err := s.Put(ctx, storetest.Sample(i, prefix+".a", deadletter.Exhausted)); err != nil {
			t.Fatal(err)
		}
	}
	dests, err := b.DeadLetterDestinations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(dests, func(x, y brokerurl.Destination) int { return strings.Compare(x.Name, y.Name) }) {
		t.Errorf("not sorted: %v", dests)
	}
	var mine []brokerurl.Destination
	for _, d := range dests {
		if strings.HasPrefix(d.Name, prefix) {
			mine = append(mine, d)
		}
	}
	want := []brokerurl.Destination{
		{Name: prefix + "-a-dlq", Topic: prefix + "-a", Depth: 2, Approximate: true},
		{Name: prefix + "-b-dlq", Topic: prefix + "-b", Depth: 0, Approximate: true},
	}
	if !slices.Equal(mine, want) {
		t.Fatalf("destinations %+v, want %+v", mine, want)
	}
}

// deleteQueues deletes the named queues, ignoring those that do not exist.
func deleteQueues(t *testing.T, a *Adapter, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range names {
		if qurl, ok, err := QueueURL(ctx, a.Client(), n); err == nil && ok {
			if _, err := a.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(qurl)}); err != nil {
				t.Logf("delete queue %s: %v", n, err)
			}
		}
	}
}
