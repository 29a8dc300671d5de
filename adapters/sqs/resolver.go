package sqs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// resolver maps topics to queue URLs through Adapter.QueueName and GetQueueUrl, caching the
// URLs of queues that exist. It is watermill-aws's QueueUrlResolver for the adapter's publisher
// and subscribers, and the adapter's own lookup for retries and dead letters.
type resolver struct {
	a     *Adapter
	mu    sync.RWMutex
	cache map[string]string // queue name -> URL
	sizes map[string]int    // queue URL -> MaximumMessageSize
}

var _ wmsqs.QueueUrlResolver = (*resolver)(nil)

// ResolveQueueUrl implements wmsqs.QueueUrlResolver.
func (r *resolver) ResolveQueueUrl(ctx context.Context, p wmsqs.ResolveQueueUrlParams) (wmsqs.QueueUrlResolverResult, error) {
	name := r.a.QueueName(p.Topic)
	url, exists, err := r.lookup(ctx, name)
	if err != nil {
		return wmsqs.QueueUrlResolverResult{}, err
	}
	res := wmsqs.QueueUrlResolverResult{QueueName: wmsqs.QueueName(name), Exists: &exists}
	if exists {
		u := wmsqs.QueueURL(url)
		res.QueueURL = &u
	}
	return res, nil
}

// lookup returns the URL of the queue called name, and false if it does not exist.
func (r *resolver) lookup(ctx context.Context, name string) (string, bool, error) {
	r.mu.RLock()
	url, ok := r.cache[name]
	r.mu.RUnlock()
	if ok {
		return url, true, nil
	}
	out, err := r.a.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("millrace sqs: get URL of queue %s: %w", name, err)
	}
	url = aws.ToString(out.QueueUrl)
	r.mu.Lock()
	r.cache[name] = url
	r.mu.Unlock()
	return url, true, nil
}

// forget drops the cached URL of the queue called name (found deleted).
func (r *resolver) forget(name string) {
	r.mu.Lock()
	delete(r.cache, name)
	r.mu.Unlock()
}

// url returns the URL of topic's queue, or an error wrapping ErrQueueMissing.
func (r *resolver) url(ctx context.Context, topic string) (string, error) {
	name := r.a.QueueName(topic)
	url, exists, err := r.lookup(ctx, name)
	if err != nil {
		return "", err
	}
	if !exists {
		return "", fmt.Errorf("%w: %s (topic %q)", ErrQueueMissing, name, topic)
	}
	return url, nil
}

// baseAttributes are the attributes the adapter gives a queue it creates before knowing the
// retry policy (Subscribe or Publish with CreateQueues): the visibility timeout for a work
// queue, the retention for a dead-letter queue. Provision adds the RedrivePolicy.
func (a *Adapter) baseAttributes(name string) map[string]string {
	if a.isDeadLetterQueue(name) {
		return map[string]string{string(types.QueueAttributeNameMessageRetentionPeriod): seconds(a.cfg.DeadLetterRetention)}
	}
	return map[string]string{string(types.QueueAttributeNameVisibilityTimeout): seconds(a.cfg.VisibilityTimeout)}
}

// createQueueInput is watermill-aws's GenerateCreateQueueInput for the adapter's publisher.
func (a *Adapter) createQueueInput(_ context.Context, name wmsqs.QueueName, _ wmsqs.QueueConfigAttributes) (*awssqs.CreateQueueInput, error) {
	return &awssqs.CreateQueueInput{QueueName: aws.String(string(name)), Attributes: createAttributes(string(name), a.baseAttributes(string(name)))}, nil
}

// createAttributes returns the attributes to create the queue called name with: attrs, and
// FifoQueue for a FIFO queue's name (SQS requires it with the ".fifo" suffix).
func createAttributes(name string, attrs map[string]string) map[string]string {
	if !isFIFOQueue(name) {
		return attrs
	}
	out := make(map[string]string, len(attrs)+1)
	maps.Copy(out, attrs)
	out[string(types.QueueAttributeNameFifoQueue)] = "true"
	return out
}

// ensureQueue returns the URL of the queue called name, creating it with attrs when it is
// missing and Config.CreateQueues is on; created reports whether it did.
func (a *Adapter) ensureQueue(ctx context.Context, name string, attrs map[string]string) (url string, created bool, err error) {
	url, exists, err := a.urls.lookup(ctx, name)
	if err != nil || exists {
		return url, false, err
	}
	if !a.cfg.CreateQueues {
		return "", false, fmt.Errorf("%w: %s (create it, or set Config.CreateQueues)", ErrQueueMissing, name)
	}
	attrs = createAttributes(name, attrs)
	out, err := a.client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	var raced *types.QueueNameExists
	if errors.As(err, &raced) { // created concurrently with other attributes: verified by the caller
		url, _, err = a.urls.lookup(ctx, name)
		return url, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("millrace sqs: create queue %s: %w", name, err)
	}
	a.cfg.Logger.InfoContext(ctx, "millrace sqs: queue created", "queue", name, "attributes", attrs)
	url = aws.ToString(out.QueueUrl)
	a.urls.mu.Lock()
	a.urls.cache[name] = url
	a.urls.mu.Unlock()
	return url, true, nil
}

// seconds formats a whole-second duration as SQS attribute text.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64(d/time.Second), 10)
}

// maxSize returns the MaximumMessageSize of the queue at url, cached; FallbackMaxMessageSize if
// it cannot be read (not cached, so the next call asks again).
func (r *resolver) maxSize(ctx context.Context, url string) int {
	r.mu.RLock()
	n, ok := r.sizes[url]
	r.mu.RUnlock()
	if ok {
		return n
	}
	out, err := r.a.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize},
	})
	if err != nil {
		r.a.cfg.Logger.WarnContext(ctx, "millrace sqs: cannot read MaximumMessageSize, assuming the fallback",
			"queue_url", url, "fallback", FallbackMaxMessageSize, "error", err)
		return FallbackMaxMessageSize
	}
	n, ok = maxMessageSize(out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)])
	if !ok {
		return FallbackMaxMessageSize
	}
	r.mu.Lock()
	if r.sizes == nil {
		r.sizes = map[string]int{}
	}
	r.sizes[url] = n
	r.mu.Unlock()
	return n
}

// forgetSize drops the cached MaximumMessageSize of the queue at url.
func (r *resolver) forgetSize(url string) {
	r.mu.Lock()
	delete(r.sizes, url)
	r.mu.Unlock()
}
