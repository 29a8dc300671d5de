package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/millrace/millrace"
)

// BacklogTimeout bounds the reading of every topic's Backlog on each collection (the topics
// are read at once).
const BacklogTimeout = 5 * time.Second

// KeyPartition is the partition of a millrace.partition.lag point.
const KeyPartition = attribute.Key("messaging.destination.partition.id")

// backlogGauges are the instruments ObserveBacklog feeds, made on first use.
type backlogGauges struct {
	once                                  sync.Once
	err                                   error
	waiting, inFlight, retries, dead, lag metric.Int64ObservableGauge

	mu     sync.Mutex
	topics map[*backlogTopic]struct{}
	logger *slog.Logger
}

type backlogTopic struct {
	r     millrace.BacklogReporter
	attrs []attribute.KeyValue
	set   metric.ObserveOption
}

// ObserveBacklog reports topic's Backlog from r as gauges on every collection of the meter's
// readers (a Prometheus scrape, a periodic reader's interval), until the returned stop is
// called: millrace.backlog.waiting, millrace.backlog.in_flight, millrace.retries.waiting,
// millrace.dead_letter.depth, and millrace.partition.lag per partition where the broker has
// partitions. A count the broker cannot give (millrace.Unknown) is not observed. A failed read
// is logged (logger, default slog.Default()) and observes nothing for that topic. The router
// calls it in Run for every handler's topic when its adapter is a millrace.BacklogReporter.
func (t *Telemetry) ObserveBacklog(r millrace.BacklogReporter, broker, topic string, logger *slog.Logger) (stop func(), err error) {
	g := &t.backlog
	g.once.Do(func() { g.err = t.initBacklog() })
	if g.err != nil {
		return nil, g.err
	}
	attrs := []attribute.KeyValue{KeyMessagingSystem.String(broker), KeyDestination.String(topic)}
	// attribute.NewSet sorts the slice it is given: give it a copy, attrs[0] stays the broker.
	bt := &backlogTopic{r: r, attrs: attrs, set: metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue(nil), attrs...)...))}
	g.mu.Lock()
	if logger != nil && g.logger == nil {
		g.logger = logger
	}
	g.topics[bt] = struct{}{}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.topics, bt)
		g.mu.Unlock()
	}, nil
}

func (t *Telemetry) initBacklog() error {
	g := &t.backlog
	g.topics = map[*backlogTopic]struct{}{}
	m := t.meter
	var err error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		if err != nil {
			return nil
		}
		var o metric.Int64ObservableGauge
		o, err = m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return o
	}
	g.waiting = gauge("millrace.backlog.waiting", "{message}", "Messages no consumer has been given yet (group lag, ready, visible, pending).")
	g.inFlight = gauge("millrace.backlog.in_flight", "{message}", "Messages consumers hold unsettled (pending entries, unacked, in flight).")
	g.retries = gauge("millrace.retries.waiting", "{message}", "Retries scheduled and not yet delivered.")
	g.dead = gauge("millrace.dead_letter.depth", "{message}", "Messages in the topic's dead-letter destination.")
	g.lag = gauge("millrace.partition.lag", "{message}", "Lag of one partition: high watermark minus committed offset.")
	if err != nil {
		return fmt.Errorf("millrace telemetry: %w", err)
	}
	_, err = m.RegisterCallback(t.observeBacklog, g.waiting, g.inFlight, g.retries, g.dead, g.lag)
	if err != nil {
		return fmt.Errorf("millrace telemetry: %w", err)
	}
	return nil
}

func (t *Telemetry) observeBacklog(ctx context.Context, o metric.Observer) error {
	g := &t.backlog
	g.mu.Lock()
	topics := make([]*backlogTopic, 0, len(g.topics))
	for bt := range g.topics {
		topics = append(topics, bt)
	}
	logger := g.logger
	g.mu.Unlock()
	if logger == nil {
		logger = slog.Default()
	}
	// Every topic is read at once, all within one BacklogTimeout: read one after the other, a
	// broker that does not answer would make a collection take topics x BacklogTimeout and
	// fail the scrape (counters included) while it is down. A reader that ignores its ctx is
	// left behind, its result dropped.
	type reading struct {
		bt  *backlogTopic
		b   millrace.Backlog
		err error
	}
	rctx, cancel := context.WithTimeout(ctx, BacklogTimeout)
	defer cancel()
	results := make(chan reading, len(topics))
	for _, bt := range topics {
		go func() {
			b, err := bt.r.Backlog(rctx, topicOf(bt.attrs))
			results <- reading{bt, b, err}
		}()
	}
	for range topics {
		var r reading
		select {
		case r = <-results:
		case <-rctx.Done():
			logger.Warn("millrace telemetry: reading the backlog took longer than BacklogTimeout; observed without it", "timeout", BacklogTimeout)
			return nil
		}
		if r.err != nil {
			logger.Warn("millrace telemetry: reading the backlog failed", "topic", topicOf(r.bt.attrs), "error", r.err)
			continue
		}
		b, bt := r.b, r.bt
		for inst, v := range map[metric.Int64ObservableGauge]int64{g.waiting: b.Waiting, g.inFlight: b.InFlight, g.retries: b.RetriesWaiting, g.dead: b.DeadLetters} {
			if v >= 0 {
				o.ObserveInt64(inst, v, bt.set)
			}
		}
		for _, p := range b.Partitions {
			o.ObserveInt64(g.lag, max(p.Lag, 0), metric.WithAttributes(bt.attrs[0], KeyDestination.String(p.Topic), KeyPartition.String(strconv.Itoa(int(p.Partition)))))
		}
	}
	return nil
}

func topicOf(attrs []attribute.KeyValue) string {
	for _, kv := range attrs {
		if kv.Key == KeyDestination {
			return kv.Value.AsString()
		}
	}
	return ""
}
