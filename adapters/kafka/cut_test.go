package kafka_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/conformance/cutbattery"
)

// cutTarget puts every connection of the adapter (the consumer group's, the commit and
// transactional producers', the retry producer's and the admin's) behind the battery's proxy:
// brokers advertise their own addresses in metadata, so sarama dials through a Net.Proxy dialer
// that maps each broker address to its proxy (the adapter puts its connection guard around it). The workload is published, and dead letters
// read, by a second adapter on direct connections.
type cutTarget struct {
	atLeastOnce bool
}

func (c cutTarget) Name() string {
	if c.atLeastOnce {
		return "kafka/at-least-once"
	}
	return "kafka"
}

func (cutTarget) Upstreams(t testing.TB) []string { return brokers(t) }

// cutReadTimeout is the battery's sarama Net.ReadTimeout (default 30 s): a request on a
// connection a black hole swallowed fails after it, and the bound scales with it.
const cutReadTimeout = 5 * time.Second

func (c cutTarget) Connect(_ context.Context, t testing.TB, topic string, proxied []string) (cutbattery.System, error) {
	upstream := brokers(t)
	route := map[string]string{}
	for i, u := range upstream {
		route[u] = proxied[i]
	}
	sc := sarama.NewConfig()
	sc.Net.ReadTimeout = cutReadTimeout
	sc.Net.WriteTimeout = cutReadTimeout
	sc.Net.DialTimeout = cutReadTimeout
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = routeDialer{route: route, d: &net.Dialer{Timeout: cutReadTimeout}}
	group := uniqueName("millrace-cutbattery")
	a, err := kafka.New(kafka.Config{Brokers: upstream, ConsumerGroup: group, Sarama: sc, AtLeastOnce: c.atLeastOnce,
		MaxInFlight: 4, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return cutbattery.System{}, err
	}
	tools := newAdapter(t, uniqueName("millrace-cutbattery-tools"), nil)
	kt := killTarget{atLeastOnce: c.atLeastOnce}
	t.Cleanup(func() { _ = kt.Cleanup(context.Background(), nil, topic) })
	return cutbattery.System{
		Adapter:     a,
		Publisher:   tools.Publisher(),
		DeadLetters: tools.Subscriber(),
		Pending: func(_ context.Context, topic string) (int, error) {
			return pendingRecords(upstream, group, topic)
		},
		Bound: kafkaCutBound(4),
	}, nil
}

// kafkaCutBound is the bound doc.go states under "Connection loss", for cutReadTimeout and the
// battery's MaxInFlight.
func kafkaCutBound(inFlight int) cutbattery.Bound {
	// A black-holed request fails after the read timeout; sarama reconnects and the group
	// rejoins, and the backlog built up meanwhile is handled before the probe. The adapter's
	// clients hold a connection to each broker, all caught by the black hole (or opened during
	// it); without the adapter's connection guard (connguard.go) sarama found them one after
	// another, a read timeout each (a trace of an 18.4 s resume on 3 brokers: a fetch, the
	// coordinator lookup on a second broker, a metadata request, a produce, each timing out
	// about 5 s after the one before). The guard closes them all at the first timeout, so one
	// read timeout is paid whatever the number of brokers: ReadTimeout + 10 s, 15 s.
	// Measured with a 5 s read timeout on the 3-broker cluster, three runs with the guard:
	// 3.1 s each transactional, 3.4, 3.3 and 3.4 s at-least-once (the black holes; resets
	// 0.3-0.5 s), every black-holed connection closed within 5.5 s, none left silent; the same
	// session without it: 16.5 s transactional (fails this bound), 8.5 s at-least-once, black-
	// holed connections held up to 39.5 s and 3 still silent at the end. Before, on one
	// broker: at most 5.2 s in 6 runs.
	return cutbattery.Bound{
		Resume:             cutReadTimeout + 10*time.Second,
		Settle:             cutReadTimeout + 10*time.Second,
		DuplicatesPerCut:   2 * 17 * inFlight,
		AttemptsLostPerCut: 0, // the attempt lives in the record: a lost delivery repeats its number
	}
}

// routeDialer dials each broker address's proxy instead of the broker.
type routeDialer struct {
	route map[string]string
	d     *net.Dialer
}

func (r routeDialer) Dial(network, addr string) (net.Conn, error) {
	if to, ok := r.route[addr]; ok {
		addr = to
	}
	return r.d.Dial(network, addr)
}

// pendingRecords counts the records of topic and its retry topics past the group's committed
// offsets that a read_committed reader gets.
func pendingRecords(list []string, group, topic string) (int, error) {
	client, err := sarama.NewClient(list, sarama.NewConfig())
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	ca, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return 0, err
	}
	names, err := client.Topics()
	if err != nil {
		return 0, err
	}
	want := map[string][]int32{}
	for _, name := range names {
		if name == topic || strings.HasPrefix(name, topic+kafka.RetrySuffix) {
			if want[name], err = client.Partitions(name); err != nil {
				return 0, err
			}
		}
	}
	resp, err := ca.ListConsumerGroupOffsets(group, want)
	if err != nil {
		return 0, err
	}
	pending := 0
	for name, parts := range want {
		for _, p := range parts {
			end, err := client.GetOffset(name, p, sarama.OffsetNewest)
			if err != nil {
				return 0, err
			}
			from := int64(0)
			if b := resp.GetBlock(name, p); b != nil && b.Offset >= 0 {
				from = b.Offset
			}
			n, err := committedRecords(list, name, p, from, end)
			if err != nil {
				return 0, err
			}
			pending += n
		}
	}
	return pending, nil
}

// TestCutBattery cuts every connection of the adapter mid-stream (resets and black holes, on
// dead-letter and retry hand-offs and acks), in both delivery modes, and checks it resumes by
// itself, loses nothing and duplicates within its documented bound.
func TestCutBattery(t *testing.T) {
	t.Parallel()
	brokers(t)
	for _, c := range []cutTarget{{}, {atLeastOnce: true}} {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			cutbattery.Run(t, c, cutbattery.Options{})
		})
	}
}
