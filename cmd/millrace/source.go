package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore"
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
		return nil, nil, fmt.Errorf("--store %q is not a URL: %w", redact(src.store), errUsage)
	}
	if u.Scheme == "postgres" || u.Scheme == "postgresql" {
		s, err := pgstore.Open(ctx, src.store, pgstore.Config{Schema: src.schema, Table: src.table})
		if err != nil {
			return nil, nil, fmt.Errorf("table store %s: %w", redact(src.store), err)
		}
		return s, func() { _ = s.Close() }, nil
	}
	b, err := a.openBroker(ctx, src.store)
	if err != nil {
		return nil, nil, err
	}
	dlq := src.dlqTopic
	if dlq == "" && topic == "" {
		_ = b.Close()
		return nil, nil, fmt.Errorf("a broker dead-letter source needs --topic (or --dlq-topic): a broker keeps one destination per topic: %w", errUsage)
	}
	if dlq == "" {
		dlq = b.DeadLetterTopic(topic)
	}
	s, err := b.DeadLetters(ctx, dlq)
	if err != nil {
		_ = b.Close()
		return nil, nil, fmt.Errorf("%s dead-letter destination %q: %w", u.Scheme, dlq, err)
	}
	return s, func() { _ = s.Close(); _ = b.Close() }, nil
}

// openBroker connects to the broker rawURL names through the registry.
func (a *app) openBroker(ctx context.Context, rawURL string) (Broker, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("broker URL %q is not a URL: %w", redact(rawURL), errUsage)
	}
	open, ok := a.brokers[strings.ToLower(u.Scheme)]
	if !ok {
		return nil, fmt.Errorf("unknown broker URL scheme %q (known: %s): %w", u.Scheme, schemes(a.brokers), errUsage)
	}
	b, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", redact(rawURL), err)
	}
	return b, nil
}

// redact hides a URL's password in messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}
