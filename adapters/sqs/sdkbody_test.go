package sqs_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/router"
)

// slowConn is a connection to the endpoint on which every write returns writeDelay after its
// bytes went out, and reads come in pieces of at most readChunk bytes, readDelay apart: a slow
// client machine. The endpoint has the whole request when a write returns, so it answers while
// net/http's write loop is still in its last step, and the SDK is still reading the answer
// when that step ends.
type slowConn struct {
	net.Conn
	writeDelay, readDelay time.Duration
	readChunk             int
}

func (c *slowConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	time.Sleep(c.writeDelay)
	return n, err
}

func (c *slowConn) Read(p []byte) (int, error) {
	time.Sleep(c.readDelay)
	return c.Conn.Read(p[:min(len(p), c.readChunk)])
}

// slowHTTPClient is the SDK's default transport on slowConns, counting the ReceiveMessage
// requests it sends.
func slowHTTPClient(receives *atomic.Int64) *http.Client {
	tr := awshttp.NewBuildableClient().GetTransport()
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &slowConn{Conn: c, writeDelay: 100 * time.Millisecond, readDelay: 5 * time.Millisecond, readChunk: 256}, nil
	}
	return &http.Client{Transport: countReceives{tr, receives}}
}

type countReceives struct {
	base  http.RoundTripper
	count *atomic.Int64
}

func (c countReceives) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".ReceiveMessage") {
		c.count.Add(1)
	}
	return c.base.RoundTrip(req)
}

// TestAnsweredReceiveIsNotRetriedUnderTheSDK: on a slow client the endpoint answers a
// ReceiveMessage while net/http still finishes writing the request. smithy-go closes the
// request body when the response headers arrive, and its closed body's WriteTo fails with
// io.EOF in net/http's final check of the request body; net/http then closed the connection
// under the response being read, and the SDK retried the receive ("use of closed network
// connection"). The first receive's 10 messages, handed out by the endpoint but never read,
// came back after the visibility timeout as attempt 2 and, under MaxAttempts 1, were
// dead-lettered without a handler call (the loss BenchmarkConsumeAnchors showed on fauxqs under
// load). Now every message is handled once, on attempt 1, and nothing is dead-lettered. Real
// fauxqs; only the client's connections are slowed.
func TestAnsweredReceiveIsNotRetriedUnderTheSDK(t *testing.T) {
	const n = 10
	var receives atomic.Int64
	cfg := testConfig(t)
	awsCfg := *cfg.AWSConfig
	awsCfg.HTTPClient = slowHTTPClient(&receives)
	cfg.AWSConfig = &awsCfg
	cfg.Pollers = 1
	a := newAdapter(t, cfg)
	topic := uniqueTopic("sdk-body")
	policy := millrace.RetryPolicy{MaxAttempts: 1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	sendBatch(t, topic, n, strings.Repeat("x", 1000)) // a 10-message answer is ~11 kB: read in 256-byte pieces

	var mu sync.Mutex
	handled := map[string]int{}
	var deadLetters []string
	runRouter(t, a, topic, router.Config{Policy: policy,
		OnDeadLetter: func(_ context.Context, _ *message.Message, ev router.DeadLetterEvent) {
			mu.Lock()
			deadLetters = append(deadLetters, ev.Err.Error())
			mu.Unlock()
		}},
		func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
			mu.Lock()
			handled[at.NativeID]++
			mu.Unlock()
			return nil
		})
	// The lost messages would return VisibilityTimeout (3 s) after their receive.
	deadline := time.Now().Add(cfg.VisibilityTimeout + 5*time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		lost := len(deadLetters)
		mu.Unlock()
		if lost > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(deadLetters) > 0 {
		t.Fatalf("%d messages dead-lettered (%d ReceiveMessage requests so far), first: %s", len(deadLetters), receives.Load(), deadLetters[0])
	}
	if len(handled) != n {
		t.Fatalf("%d messages handled, want %d", len(handled), n)
	}
	for id, calls := range handled {
		if calls != 1 {
			t.Errorf("message %s handled %d times, want 1", id, calls)
		}
	}
}

// sendBatch sends n messages with body to topic's queue with a plain SDK client (one
// SendMessageBatch), so that the adapter's client does not publish them.
func sendBatch(t *testing.T, topic string, n int, body string) {
	t.Helper()
	client := awssqs.NewFromConfig(awsConfig(), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint(t)) })
	ctx := context.Background()
	url, err := client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(sqs.QueueName(topic))})
	if err != nil {
		t.Fatal(err)
	}
	entries := make([]types.SendMessageBatchRequestEntry, n)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)}
	}
	out, err := client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url.QueueUrl, Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Failed) > 0 {
		t.Fatalf("%d sends failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
	}
}
