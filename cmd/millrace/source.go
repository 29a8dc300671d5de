package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// openStore opens the dead-letter source: the table store for postgres:// URLs, otherwise the
// dead-letter destination of topic on the broker the URL names. The returned close releases
// everything opened.
func (a *app) openStore(ctx context.Context, src sourceFlags, topic string) (deadletter.Store, func(), error) {
	if src.store == "" {
		return nil, nil, fmt.Errorf("no dead-letter source: set --store (postgres://... or a broker URL) or MILLRACE_STORE: %w", errUsage)
	}
	u, err := url.Parse(src.store)
	if err != nil || u.Scheme == "" {
		return nil, nil, fmt.Errorf("--store %q is not a URL (percent-encode / ? # @ : %% in a user name or password): %w", brokerurl.Redact(src.store), errUsage)
	}
	if topic == "" && src.dlqTopic == "" && slices.Contains(a.mux.Schemes(false), strings.ToLower(u.Scheme)) {
		return nil, nil, fmt.Errorf("a broker dead-letter source needs --topic (or --dlq-topic): a broker keeps one destination per topic: %w", errUsage)
	}
	s, err := a.mux.OpenStore(ctx, src.store, brokerurl.StoreOptions{
		Topic: topic, DeadLetterTopic: src.dlqTopic, Table: src.table, Schema: src.schema,
	})
	if err != nil {
		return nil, nil, naming("--store", src.store, usageIfURL(err))
	}
	return s, func() { _ = s.Close() }, nil
}

// openBroker connects to the broker rawURL names, to publish and to read dead letters.
func (a *app) openBroker(ctx context.Context, rawURL string) (brokerurl.Broker, error) {
	b, err := a.mux.OpenBroker(ctx, rawURL, brokerurl.Options{NoConsume: true})
	if err != nil {
		return nil, naming("broker", rawURL, usageIfURL(err))
	}
	return b, nil
}

// naming prefixes err with what and the redacted URL, unless err names the URL already (a
// driver's "connect to <URL>"): a message says the URL once.
func naming(what, rawURL string, err error) error {
	r := brokerurl.Redact(rawURL)
	if strings.Contains(err.Error(), r) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s %s: %w", what, r, err)
}

// usageIfURL marks a URL the user got wrong (scheme, parameters) as bad usage (exit status 2).
func usageIfURL(err error) error {
	if errors.Is(err, brokerurl.ErrUnknownScheme) || errors.Is(err, brokerurl.ErrUnknownParameter) || errors.Is(err, brokerurl.ErrInvalidURL) {
		return fmt.Errorf("%w: %w", err, errUsage)
	}
	return err
}

// redact hides a URL's password in messages.
func redact(raw string) string { return brokerurl.Redact(raw) }
