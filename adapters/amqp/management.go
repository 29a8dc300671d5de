package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/millrace/millrace"
)

// managementBodyLimit bounds the body of one queue's management API object that Backlog reads
// (the object lists the queue's consumers: about 500 bytes each).
const managementBodyLimit = 1 << 20

// managementWarnEvery is how often, at most, Backlog logs that the management API failed, per
// adapter and topic.
const managementWarnEvery = time.Minute

// managementGet sends GET base + path (path escaped already) to RabbitMQ's management API,
// with base's credentials in the Authorization header, bounded by ctx and managementTimeout.
// The response's body is the caller's to close. Errors never show the password.
func managementGet(ctx context.Context, base *url.URL, path string) (*http.Response, context.CancelFunc, error) {
	shown := *base
	shown.User = nil // the credentials go in the Authorization header, never in a message
	ctx, cancel := context.WithTimeout(ctx, managementTimeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, shown.String()+path, nil)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("management API URL %s: %w", shown.String(), err)
	}
	password, _ := base.User.Password()
	req.SetBasicAuth(base.User.Username(), password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		var ue *url.Error // its message repeats the request's URL
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, fmt.Errorf("RabbitMQ's management API at %s does not answer (%w)", shown.String(), err)
	}
	return resp, cancel, nil
}

// unacked returns the messages_unacknowledged of queue from the management API at
// Config.ManagementURL: millrace.Unknown when the API fails (err says why) or does not count
// them yet (absent before the queue's first statistics, or with statistics disabled: err nil).
func (a *Adapter) unacked(ctx context.Context, queue string) (int64, error) {
	amqpURL, err := url.Parse(a.cfg.URL)
	if err != nil {
		return millrace.Unknown, fmt.Errorf("Config.URL: %w", err)
	}
	base, err := managementURL(amqpURL, a.cfg.ManagementURL)
	if err != nil {
		return millrace.Unknown, err
	}
	vhost := vhostOf(a.cfg.URL)
	resp, cancel, err := managementGet(ctx, base, "/api/queues/"+url.PathEscape(vhost)+"/"+url.PathEscape(queue))
	if err != nil {
		return millrace.Unknown, err
	}
	defer cancel()
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, managementBodyLimit)
	defer func() { _, _ = io.Copy(io.Discard, body) }() // the connection is reused for the next read
	shown := *base
	shown.User = nil
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return millrace.Unknown, fmt.Errorf("RabbitMQ's management API at %s refused user %q (401): it needs the management, monitoring or administrator tag", shown.String(), base.User.Username())
	case http.StatusNotFound:
		return millrace.Unknown, fmt.Errorf("RabbitMQ's management API at %s has no queue %q in virtual host %q (404)", shown.String(), queue, vhost)
	default:
		head, _ := io.ReadAll(io.LimitReader(body, 200))
		return millrace.Unknown, fmt.Errorf("RabbitMQ's management API at %s answered %s: %s", shown.String(), resp.Status, strings.Join(strings.Fields(string(head)), " "))
	}
	var q struct {
		Unacked *json.Number `json:"messages_unacknowledged"`
	}
	if err := json.NewDecoder(body).Decode(&q); err != nil {
		return millrace.Unknown, fmt.Errorf("RabbitMQ's management API at %s: reading queue %q (at most %d bytes): %w", shown.String(), queue, managementBodyLimit, err)
	}
	if q.Unacked == nil {
		return millrace.Unknown, nil
	}
	n, err := strconv.ParseInt(q.Unacked.String(), 10, 64)
	if err != nil || n < 0 {
		return millrace.Unknown, fmt.Errorf("RabbitMQ's management API at %s: queue %q: messages_unacknowledged %.40q is not a count", shown.String(), queue, q.Unacked.String())
	}
	return n, nil
}

// managementWarned is when Backlog last logged a management API failure, per adapter and topic.
var managementWarned struct {
	mu sync.Mutex
	at map[managementWarnKey]time.Time
}

// managementWarnKey names an adapter by its address, which does not keep it alive.
type managementWarnKey struct {
	adapter uintptr
	topic   string
}

// shouldWarn reports whether a management API failure for topic is to be logged now: once per
// managementWarnEvery per adapter and topic. Entries older than that are dropped as they
// suppress nothing, so the map holds only the failures of the last minute.
func (a *Adapter) shouldWarn(topic string, now time.Time) bool {
	w := &managementWarned
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.at == nil {
		w.at = map[managementWarnKey]time.Time{}
	}
	for k, t := range w.at {
		if now.Sub(t) >= managementWarnEvery {
			delete(w.at, k)
		}
	}
	k := managementWarnKey{reflect.ValueOf(a).Pointer(), topic}
	if _, ok := w.at[k]; ok {
		return false
	}
	w.at[k] = now
	return true
}
