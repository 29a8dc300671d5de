package brokerurl_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/plan"
)

// planDriver plans on the memory adapter; its brokers compare with a fixed list of mismatches.
type planDriver struct {
	scheme  string
	planner bool
	checked *[]string // URLs whose Check ran
	ms      []plan.Mismatch
	openErr error // Open's error
}

func (d planDriver) Schemes() []string { return []string{d.scheme} }
func (d planDriver) Open(context.Context, *url.URL, brokerurl.Options) (brokerurl.Broker, error) {
	if d.openErr != nil {
		return nil, d.openErr
	}
	return &planBroker{d: d}, nil
}
func (d planDriver) OpenAdapter(context.Context, *url.URL, brokerurl.Options) (millrace.Adapter, error) {
	return newMemory(), nil
}

func newMemory() *memory.Adapter {
	a, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	return a
}

type plannerDriver struct{ planDriver }

func (d plannerDriver) Plan(u *url.URL, spec plan.Spec) (plan.BrokerPlan, error) {
	if u.Query().Has("bad") {
		return plan.BrokerPlan{}, brokerurl.ErrUnknownParameter
	}
	return plan.New(spec, newMemory()), nil
}

type planBroker struct{ d planDriver }

func (b *planBroker) Adapter() millrace.Adapter { return newMemory() }
func (b *planBroker) TopicExists(context.Context, string) (bool, error) {
	return true, nil
}
func (b *planBroker) DeadLetters(context.Context, string) (deadletter.Store, error) { return nil, nil }
func (b *planBroker) DeadLetterDestinations(context.Context) ([]brokerurl.Destination, error) {
	return nil, nil
}
func (b *planBroker) PrepareReplay(deadletter.Record, *message.Message) {}
func (b *planBroker) Close() error                                      { return nil }
func (b *planBroker) Check(_ context.Context, spec plan.Spec, want plan.BrokerPlan) ([]plan.Mismatch, error) {
	*b.d.checked = append(*b.d.checked, want.URL)
	return b.d.ms, nil
}

func TestMuxPlan(t *testing.T) {
	var checked []string
	m := brokerurl.NewMux()
	m.Register(plannerDriver{planDriver{scheme: "good", checked: &checked}})
	m.Register(plannerDriver{planDriver{scheme: "drift", checked: &checked, ms: []plan.Mismatch{{Resource: "queue q", Setting: "ttl", Want: "1", Got: "2"}}}})
	m.Register(planDriver{scheme: "noplan", checked: &checked})
	spec := plan.Spec{Topic: "t", Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}}
	ctx := context.Background()

	r, err := m.Plan(ctx, spec, []string{"good://user:secret@h/", "drift://h"}, brokerurl.PlanOptions{})
	if err != nil || !r.OK || len(r.Brokers) != 2 || len(checked) != 0 {
		t.Fatalf("offline plan: %v, OK %v, brokers %d, checked %v", err, r.OK, len(r.Brokers), checked)
	}
	if u := r.Brokers[0].URL; strings.Contains(u, "secret") {
		t.Errorf("URL %q shows the password", u)
	}
	r, err = m.Plan(ctx, spec, []string{"good://h", "drift://h"}, brokerurl.PlanOptions{Check: true})
	if err != nil || r.OK || len(checked) != 2 || !r.Brokers[0].Checked || len(r.Brokers[1].Mismatches) != 1 {
		t.Fatalf("check: %v, OK %v, checked %v, %+v", err, r.OK, checked, r.Brokers)
	}

	for _, tc := range []struct {
		urls []string
		spec plan.Spec
		want error
	}{
		{[]string{"noplan://h"}, spec, brokerurl.ErrNoPlanner},
		{[]string{"what://h"}, spec, brokerurl.ErrUnknownScheme},
		{[]string{"good://h?bad=1"}, spec, brokerurl.ErrUnknownParameter},
		{nil, spec, brokerurl.ErrInvalidURL},
	} {
		if _, err := m.Plan(ctx, tc.spec, tc.urls, brokerurl.PlanOptions{}); !errors.Is(err, tc.want) {
			t.Errorf("Plan(%v) = %v, want %v", tc.urls, err, tc.want)
		}
	}
	if _, err := m.Plan(ctx, plan.Spec{Policy: spec.Policy}, []string{"good://h"}, brokerurl.PlanOptions{}); err == nil || !strings.Contains(err.Error(), "topic") {
		t.Errorf("no topic: %v", err)
	}
	if d, u, err := m.Driver("good://h/x"); err != nil || d.Schemes()[0] != "good" || u.Path != "/x" {
		t.Errorf("Driver = %v, %v, %v", d, u, err)
	}
}

// TestMuxPlanCheckError: a broker that cannot be reached is reported as not checked, with the
// driver's error (which names its URL) once; the other brokers' results stay in the report.
func TestMuxPlanCheckError(t *testing.T) {
	var checked []string
	m := brokerurl.NewMux()
	m.Register(plannerDriver{planDriver{scheme: "drift", checked: &checked, ms: []plan.Mismatch{{Resource: "queue q", Setting: "ttl", Want: "1", Got: "2"}}}})
	m.Register(plannerDriver{planDriver{scheme: "down", checked: &checked, openErr: errors.New("connect to down://h: connection refused")}})
	spec := plan.Spec{Topic: "t", Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}}

	r, err := m.Plan(context.Background(), spec, []string{"drift://h", "down://h", "drift://h2"}, brokerurl.PlanOptions{Check: true})
	if err != nil {
		t.Fatalf("Plan: %v, want the failure in the report", err)
	}
	if r.OK || len(r.Brokers) != 3 || len(checked) != 2 {
		t.Fatalf("OK %v, %d brokers, checked %v", r.OK, len(r.Brokers), checked)
	}
	down := r.Brokers[1]
	if down.Checked || down.CheckError != "connect to down://h: connection refused" || down.URL != "down://h" {
		t.Errorf("unreachable broker: %+v", down)
	}
	for _, i := range []int{0, 2} {
		if b := r.Brokers[i]; !b.Checked || len(b.Mismatches) != 1 || b.CheckError != "" {
			t.Errorf("broker %d: %+v", i, b)
		}
	}
	if p := strings.Join(r.Problems(), "\n"); strings.Count(p, "down://h") != 1 || !strings.Contains(p, "could not be checked") {
		t.Errorf("problems %q: want the unreachable broker named once", p)
	}
}

func TestWithDefaultParam(t *testing.T) {
	u, _ := url.Parse("sqs+http://h?visibility=60s")
	if got := brokerurl.WithDefaultParam(u, "processing_budget", "50s"); got.Query().Get("processing_budget") != "50s" || got.Query().Get("visibility") != "60s" {
		t.Errorf("added: %s", got)
	}
	if u.Query().Has("processing_budget") {
		t.Errorf("the original URL changed: %s", u)
	}
	if got := brokerurl.WithDefaultParam(u, "visibility", "30s"); got.Query().Get("visibility") != "60s" {
		t.Errorf("overrode the URL's own value: %s", got)
	}
}
