package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/brokerurl"
)

// managementTimeout bounds one management API request when ctx has no earlier deadline.
const managementTimeout = 10 * time.Second

// DeadLetterDestinations lists the queues of the URL's virtual host whose names end with the
// dead-letter suffix (Config.DeadLetterSuffix, the URL's dlq_suffix), sorted, with their depths.
// AMQP 0-9-1 cannot list queues, so the names come from RabbitMQ's management API (the
// rabbitmq_management plugin; the URL parameter management says where it is); a depth is the
// count of ready messages a passive declare returns, which is current, where the API's counts
// lag by up to its statistics interval (5 s by default). A queue the broker will not declare
// passively (another connection's exclusive queue) gets the API's count, marked Approximate; a
// queue deleted between the two is left out.
func (b *urlBroker) DeadLetterDestinations(ctx context.Context) ([]brokerurl.Destination, error) {
	queues, err := b.listQueues(ctx)
	if err != nil {
		return nil, err
	}
	suffix := b.a.cfg.DeadLetterSuffix
	slices.SortFunc(queues, func(x, y managedQueue) int { return strings.Compare(x.Name, y.Name) })
	out := []brokerurl.Destination{}
	for _, q := range queues {
		if !strings.HasSuffix(q.Name, suffix) || q.Name == suffix {
			continue
		}
		d := brokerurl.Destination{Name: q.Name, Topic: strings.TrimSuffix(q.Name, suffix)}
		depth, ok, err := b.queueDepth(q.Name)
		var refused *amqp091.Error
		switch {
		case errors.As(err, &refused) && (refused.Code == amqp091.ResourceLocked || refused.Code == amqp091.AccessRefused):
			d.Depth, d.Approximate = q.Messages, true
		case err != nil:
			return nil, fmt.Errorf("dead-letter queue %q: %w", q.Name, err)
		case !ok:
			continue
		default:
			d.Depth = int64(depth)
		}
		out = append(out, d)
	}
	return out, nil
}

// managedQueue is a queue as the management API lists it.
type managedQueue struct {
	Name string `json:"name"`
	// Messages is ready plus unacknowledged, as of the last statistics; absent (0) before the
	// first.
	Messages int64 `json:"messages"`
}

// listQueues returns the queues of b.vhost, from the management API.
func (b *urlBroker) listQueues(ctx context.Context) ([]managedQueue, error) {
	resp, cancel, err := managementGet(ctx, b.management, "/api/queues/"+url.PathEscape(b.vhost)+"?columns=name,messages")
	if err != nil {
		return nil, fmt.Errorf("list dead-letter queues: %w: listing needs the rabbitmq_management plugin (rabbitmq-plugins enable rabbitmq_management), or the URL parameter management=<its URL>", err)
	}
	defer cancel()
	base := *b.management
	base.User = nil // the credentials go in the Authorization header, never in a message
	shown, user := base.String(), b.management.User.Username()
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return nil, fmt.Errorf("list dead-letter queues: RabbitMQ's management API at %s refused user %q (401): it needs the management, monitoring or administrator tag", shown, user)
	case http.StatusNotFound:
		return nil, fmt.Errorf("list dead-letter queues: RabbitMQ's management API at %s has no virtual host %q (404)", shown, b.vhost)
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return nil, fmt.Errorf("list dead-letter queues: RabbitMQ's management API at %s answered %s: %s", shown, resp.Status, strings.Join(strings.Fields(string(body)), " "))
	}
	var queues []managedQueue
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&queues); err != nil {
		return nil, fmt.Errorf("list dead-letter queues: RabbitMQ's management API at %s: reading the queue list: %w", shown, err)
	}
	return queues, nil
}
