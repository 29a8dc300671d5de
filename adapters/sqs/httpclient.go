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
// retryer retries (on a new connection, the idle ones being closed).
func (g *callGuard) Do(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), g.timeout)
	resp, err := g.base.Do(req.WithContext(ctx))
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
