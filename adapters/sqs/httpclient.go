package sqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
)

// DefaultCallTimeout is Config.CallTimeout's default.
const DefaultCallTimeout = 10 * time.Second

// callGuard is the HTTP client of every SQS client the adapter builds (its own and its
// publisher's): it gives each request a deadline, so that a request on a connection that went
// silent (a black hole: a firewall or NAT that dropped the connection state) fails instead of
// waiting for ever. aws-sdk-go-v2's default HTTP client has no request timeout at all (only a
// 30 s dial timeout and 30 s TCP keep-alives, which a middlebox that still holds the TCP
// connection answers), and neither has watermill-aws's publisher, which publishes with
// context.Background().
//
// When a request passes its deadline, the guard also closes the client's idle connections: they
// went silent with the one that timed out, and each would otherwise cost the next request that
// takes it from the pool a timeout of its own. Requests in flight on other connections are left
// alone (a long poll may be healthy, and cancelling it can burn an attempt).
type callGuard struct {
	base      aws.HTTPClient
	closeIdle func()
	timeout   time.Duration
}

// guardHTTP returns an option for awssqs.New that puts the resolved HTTP client behind a
// callGuard with timeout.
func guardHTTP(timeout time.Duration) func(*awssqs.Options) {
	return func(o *awssqs.Options) { o.HTTPClient = newCallGuard(o.HTTPClient, timeout) }
}

// newCallGuard wraps c. The SDK's BuildableClient (the default, and config.LoadDefaultConfig's)
// does not let its idle connections be closed, so the guard runs its transport (the same
// settings: dial and TLS timeouts, pool sizes, proxy) in an http.Client of its own, which
// follows no redirect (SQS sends none). Any other client is used as it is; its idle connections
// are closed if it has a CloseIdleConnections method (*http.Client has).
func newCallGuard(c aws.HTTPClient, timeout time.Duration) *callGuard {
	if c == nil {
		c = awshttp.NewBuildableClient()
	}
	if b, ok := c.(*awshttp.BuildableClient); ok {
		c = &http.Client{
			Transport:     b.GetTransport(),
			Timeout:       b.GetTimeout(),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	g := &callGuard{base: c, timeout: timeout, closeIdle: func() {}}
	if ci, ok := c.(interface{ CloseIdleConnections() }); ok {
		g.closeIdle = ci.CloseIdleConnections
	}
	return g
}

// withTimeout returns a guard on the same client (the same connections) with another deadline.
func (g *callGuard) withTimeout(d time.Duration) *callGuard {
	c := *g
	c.timeout = d
	return &c
}

// longerRequests returns a per-operation option that gives the call's requests timeout instead
// of the client's, for a long poll.
func longerRequests(timeout time.Duration) func(*awssqs.Options) {
	return func(o *awssqs.Options) {
		if g, ok := o.HTTPClient.(*callGuard); ok {
			o.HTTPClient = g.withTimeout(timeout)
		}
	}
}

// Do sends req with the guard's deadline, which covers reading the response body too (it ends
// when the SDK closes the body). A request that passes it fails with an error the SDK's
// retryer retries (on a new connection, the idle ones being closed). The request body goes
// to the transport as a plain reader (see readOnlyBody).
func (g *callGuard) Do(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), g.timeout)
	sent := req.WithContext(ctx)
	if sent.Body != nil && sent.Body != http.NoBody {
		sent.Body = readOnlyBody{sent.Body}
	}
	resp, err := g.base.Do(sent)
	if err != nil {
		cancel()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			g.closeIdle()
			if req.Context().Err() == nil { // our deadline, not the caller's
				return nil, fmt.Errorf("millrace sqs: no answer from %s within %s (sqs.Config.CallTimeout; a receive has WaitTime more): %w",
					req.URL.Host, g.timeout, err)
			}
		}
		return nil, err
	}
	resp.Body = &guardedBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel, g: g}
	return resp, nil
}

// readOnlyBody hides every method of the SDK's request body but Read and Close: it keeps
// net/http from killing a connection whose response is still being read.
//
// smithy-go (aws-sdk-go-v2) closes the request body as soon as the HTTP client returns the
// response headers, and its body then answers Read with io.EOF, but WriteTo (which it also
// has) with the error io.EOF. net/http's write loop may still be busy with the request at that
// moment: after sending the Content-Length bytes it copies the rest of the body to io.Discard
// to check that there is none, and io.Copy uses WriteTo, so the copy fails with io.EOF. net/http
// takes that as a failed request write and closes the connection, under the response body the
// SDK is reading: the SDK sees "use of closed network connection", which its retryer retries.
// For a ReceiveMessage that SQS has answered, the retry is a second receive, and the messages of
// the first are lost until their visibility timeout ends, with a receive counted that no
// handler saw (under MaxAttempts 1: dead-lettered unhandled); for a SendMessage, a duplicate.
// It happens when the endpoint answers within the write loop's last step: on a local endpoint
// under load, several times per BenchmarkConsumeAnchors run. Through Read alone, a closed
// body is just at its end (io.Copy ends without error), so the connection is kept.
type readOnlyBody struct{ io.ReadCloser }

// guardedBody ends a request's deadline when its response body is closed, and closes the idle
// connections if the deadline cut the body short.
type guardedBody struct {
	io.ReadCloser
	ctx    context.Context
	cancel context.CancelFunc
	g      *callGuard
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && errors.Is(b.ctx.Err(), context.DeadlineExceeded) {
		b.g.closeIdle()
	}
	return n, err
}

func (b *guardedBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
