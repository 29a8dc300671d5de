package sqs_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/conformance/cutbattery"
)

// Battery timings: short enough that recoveries come within the run. The 2 s long poll and the
// 3 s CallTimeout make a receive on a silent connection fail after 5 s; the 5 s visibility
// timeout brings back a message whose receive reply or write a cut lost.
const (
	cutWaitTime    = 2 * time.Second
	cutCallTimeout = 3 * time.Second
	cutVisibility  = 5 * time.Second
	cutBudget      = 2 * time.Second
	cutWindow      = 4
	cutPollers     = 2
)

// cutTarget puts the adapter's SQS endpoint (every call: receives, deletes, visibility changes,
// dead-letter sends) behind the battery's proxy; the workload is published, dead letters read
// and the queue inspected by a second adapter on the direct endpoint. The battery runs
// subscriptions competing subscriptions (handlers) on the topic.
type cutTarget struct {
	subscriptions int
}

func (c cutTarget) Name() string {
	if c.subscriptions == 1 {
		return "sqs/1-subscription"
	}
	return fmt.Sprintf("sqs/%d-subscriptions", c.subscriptions)
}

func (cutTarget) Upstreams(t testing.TB) []string {
	ep := endpoint(t)
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		t.Fatalf("%s=%q is not a URL with a host: %v", EnvEndpoint, ep, err)
	}
	return []string{u.Host}
}

func (c cutTarget) Connect(_ context.Context, t testing.TB, topic string, proxied []string) (cutbattery.System, error) {
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := c.config(logger)
	cfg.Endpoint = "http://" + proxied[0]
	a, err := sqs.New(cfg)
	if err != nil {
		return cutbattery.System{}, err
	}
	direct := c.config(logger)
	direct.Endpoint = endpoint(t)
	tools, err := sqs.New(direct)
	if err != nil {
		return cutbattery.System{}, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := (killTarget{}).Cleanup(ctx, tools, topic); err != nil {
			t.Logf("delete the battery's queues: %v", err)
		}
		_ = tools.Close()
	})
	return cutbattery.System{
		Adapter:     a,
		Publisher:   tools.Publisher(),
		DeadLetters: tools.Subscriber(),
		Pending: func(ctx context.Context, topic string) (int, error) {
			return killTarget{}.Pending(ctx, tools, topic)
		},
		Bound: sqsCutBound(cfg, c.subscriptions),
	}, nil
}

func (cutTarget) config(logger *slog.Logger) sqs.Config {
	aws := awsConfig()
	return sqs.Config{
		AWSConfig:         &aws,
		VisibilityTimeout: cutVisibility,
		ProcessingBudget:  cutBudget,
		WaitTime:          cutWaitTime,
		CallTimeout:       cutCallTimeout,
		Window:            cutWindow,
		Pollers:           cutPollers,
		CreateQueues:      true,
		Logger:            logger,
	}
}

// sqsCutBound is the bound doc.go states under "Connection loss", for cfg and a consumer running
// subscriptions subscriptions, with the SDK's standard retryer (3 attempts).
func sqsCutBound(cfg sqs.Config, subscriptions int) cutbattery.Bound {
	const (
		sdkBackoff = 4 * time.Second // the standard retryer's longest wait, before its third attempt
		pause      = time.Second     // the subscription's pause after a failed receive
		backlog    = 2 * time.Second // the messages published meanwhile are handled before the probe
	)
	// A poller receives again once its receive failed (WaitTime + CallTimeout, the SDK's wait,
	// the pause), and once the Window has room: a slot held by a delete or a retry write caught
	// in the cut frees when that call ends, within 2 x CallTimeout (the subscriber's own calls).
	resume := max(cfg.WaitTime+cfg.CallTimeout+sdkBackoff+pause, 2*cfg.CallTimeout)
	return cutbattery.Bound{
		Resume:             resume + backlog,
		Settle:             cfg.VisibilityTimeout + cfg.CallTimeout + sdkBackoff,
		DuplicatesPerCut:   2 * cfg.Window * subscriptions,
		AttemptsLostPerCut: cfg.Window * subscriptions,
	}
}

// TestCutBattery cuts the adapter's connections to SQS mid-stream (resets and black holes, on
// dead-letter sends, retry visibility changes and deletes) and checks that it resumes by
// itself, loses nothing and stays within its documented bound. With one subscription a
// subscription that never comes back fails the run (nobody else handles the probes); with four
// a cut catches several pooled connections at once.
func TestCutBattery(t *testing.T) {
	endpoint(t)
	for _, c := range []cutTarget{{subscriptions: 1}, {subscriptions: 4}} {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			// SQS delays are whole seconds (DelayGranularity): the policy's delay is 1 s, not 500 ms.
			cutbattery.Run(t, c, cutbattery.Options{Delay: time.Second, Handlers: c.subscriptions})
		})
	}
}
