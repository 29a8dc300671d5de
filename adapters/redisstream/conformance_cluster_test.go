package redisstream

import (
	"context"
	"testing"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance"
)

// clusterHarness runs the shared suite, the hostile-input battery included (it embeds the
// single-node harness's Foreign methods), on the test Redis Cluster with redis.NewClusterClient.
// The suite's topic names get a hash tag (clusterTopic): untagged, they would be refused at
// Provision (CheckClusterSlots).
type clusterHarness struct{ harness }

var _ conformance.Foreign = clusterHarness{}

func (clusterHarness) NewAdapter(_ context.Context, t testing.TB) (millrace.Adapter, error) {
	return newClusterTestAdapter(t, testConfig()), nil
}

// Options: the single-node timings, topic names tagged.
func (h clusterHarness) Options() conformance.Options {
	o := h.harness.Options()
	o.TopicName = clusterTopic
	return o
}

func TestConformanceCluster(t *testing.T) {
	testClusterClient(t) // skip locally, fail in CI, when a node is down
	conformance.Run(t, clusterHarness{})
}
