package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// flowConfig turns flow control on over a concurrency-detector of one
// request per endpoint.
const flowTestConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: 1}
- type: queue-scorer
- type: max-score-picker
saturationDetector:
  pluginRef: concurrency-detector
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
flowControl:
  maxRequests: "10"
`

func gauge(t *testing.T, s *Server, name string) (float64, bool) {
	t.Helper()
	fams, err := s.Registry().Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		var v float64
		for _, m := range f.GetMetric() {
			v += m.GetGauge().GetValue()
		}
		return v, true
	}
	return 0, false
}

func family(t *testing.T, s *Server, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := s.Registry().Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// TestFlowControlHoldsUntilRoom: with the flowControl gate, a request that
// arrives while the only endpoint is at its concurrency limit waits (no
// answer) and is routed as soon as the request in flight ends; a
// configuration reload while it waits keeps it waiting (the one flow
// controller takes the new settings). The controller's state is on
// /metrics with closed label sets.
func TestFlowControlHoldsUntilRoom(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(flowTestConfig), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), ConfigFile: cfgFile})
	require.NotNil(t, s.gen.Load().flow)
	require.Eventually(t, func() bool { return s.gen.Load().flow.c.Stats().Running }, 5*time.Second, time.Millisecond)
	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	first, err := client.Process(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, route(t, first)) // forwarded; its response never comes: in flight

	second, err := client.Process(ctx)
	require.NoError(t, err)
	require.NoError(t, second.Send(headers(false, ":path", "/v1/completions", ":method", "POST", "x-gateway-inference-fairness-id", "tenant-b")))
	require.NoError(t, second.Send(reqBody(`{"model":"m","prompt":"hello"}`)))
	got := make(chan *extprocv3.ProcessingResponse, 1)
	go func() {
		r, err := second.Recv()
		if err == nil {
			got <- r
		}
		close(got)
	}()
	old := s.gen.Load().flow
	require.Eventually(t, func() bool { return old.c.Stats().Requests == 1 }, 5*time.Second, time.Millisecond, "the second request waits")
	if v, ok := gauge(t, s, "inference_extension_flow_control_queue_size"); assert.True(t, ok) {
		assert.Equal(t, 1.0, v)
	}
	if v, ok := gauge(t, s, NameFlowPoolSaturation); assert.True(t, ok) {
		assert.GreaterOrEqual(t, v, 1.0)
	}
	if v, ok := gauge(t, s, NameFlowQueueUtilization); assert.True(t, ok) {
		assert.InDelta(t, 0.1, v, 1e-9, "1 of maxRequests 10")
	}

	// A reload while it waits: the same controller, new settings.
	first0 := s.gen.Load()
	writeAtomic(t, cfgFile, strings.Replace(flowTestConfig, `maxRequests: "10"`, `maxRequests: "20"`, 1))
	require.Eventually(t, func() bool { return s.gen.Load() != first0 }, 10*time.Second, 10*time.Millisecond)
	require.Same(t, old, s.gen.Load().flow)
	assert.Equal(t, uint64(20), old.c.Stats().MaxRequests)
	assert.Equal(t, uint64(1), old.c.Stats().Requests, "still waiting")
	select {
	case r := <-got:
		t.Fatalf("answered while saturated: %v", r)
	case <-time.After(100 * time.Millisecond):
	}

	// The request in flight ends: the waiting one is routed.
	require.NoError(t, first.CloseSend())
	select {
	case r := <-got:
		require.NotNil(t, r)
		require.NotNil(t, r.GetRequestHeaders(), "routed, not refused: %v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("never released")
	}
	require.NoError(t, second.CloseSend())
	assert.Equal(t, uint64(2), old.c.Stats().Outcomes[flowcontrol.Dispatched], "both dispatched (the first at once)")
	assert.Zero(t, old.c.Stats().Outcomes[flowcontrol.Stopped], "nothing refused by the reload")

	// Closed label sets.
	outcomes := family(t, s, NameFlowOutcomes)
	require.NotNil(t, outcomes)
	var names []string
	for _, m := range outcomes.GetMetric() {
		for _, l := range m.GetLabel() {
			names = append(names, l.GetName()+"="+l.GetValue())
		}
	}
	assert.ElementsMatch(t, []string{"outcome=dispatched", "outcome=queue_full", "outcome=saturated", "outcome=ttl_expired",
		"outcome=no_endpoints", "outcome=cancelled", "outcome=flow_control_stopped"}, names)
	cycles := family(t, s, "inference_extension_flow_control_dispatch_cycle_duration_seconds")
	require.NotNil(t, cycles)
	assert.Positive(t, cycles.GetMetric()[0].GetHistogram().GetSampleCount(), "dispatch cycles observed")
	for _, m := range family(t, s, NameFlowPoolSaturation).GetMetric() {
		require.Len(t, m.GetLabel(), 1)
		assert.Equal(t, "inference_pool", m.GetLabel()[0].GetName())
	}
}

// TestReadmeFlowControlExample: the configuration the README's
// flow-control section shows serves with a flow controller.
func TestReadmeFlowControlExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(readme), "\n## Flow control\n")
	require.True(t, ok)
	sec, _, _ = strings.Cut(sec, "\n## ")
	i := strings.Index(sec, "```yaml\napiVersion:")
	require.GreaterOrEqual(t, i, 0)
	block, _, _ := strings.Cut(sec[i+len("```yaml\n"):], "```")
	s, err := New(Config{EndpointsFile: sims(t, 1), ConfigText: block, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	defer s.closeListeners()
	defer s.closeConfig()
	require.NotNil(t, s.gen.Load().flow)
	assert.Equal(t, uint64(2<<30), s.gen.Load().flow.c.Stats().MaxBytes)
}

// BenchmarkFlowPoolSaturation is the dispatcher's look at the pool (also
// every request's, when nothing is queued): concurrency-detector's pool
// view over the routable endpoints, no producer run.
func BenchmarkFlowPoolSaturation(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			s, err := New(Config{EndpointsFile: endpointsFile(b, n), ConfigText: flowTestConfig, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"})
			require.NoError(b, err)
			defer s.closeListeners()
			defer s.closeConfig()
			s.commitFlow(s.gen.Load())
			pool := s.gen.Load().flow.pool
			b.ReportAllocs()
			for b.Loop() {
				if _, got := pool.Saturation(); got != n {
					b.Fatal(got)
				}
			}
		})
	}
}

// reloadProducerConfig is a tokens-mode concurrency-detector with an
// explicit inflight-load-producer whose tokenAccounting is ACCT.
const reloadProducerConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: inflight-load-producer
  parameters: {tokenAccounting: ACCT}
- type: concurrency-detector
  parameters: {concurrencyMode: tokens, maxTokenConcurrency: 100}
- type: queue-scorer
- type: max-score-picker
saturationDetector:
  pluginRef: concurrency-detector
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
flowControl:
  maxRequests: "10"
`

// TestFlowPoolSaturationFollowsReloadedProducer: a detector kept across a
// reload while its producer changes (tokenAccounting gie → llm-d): the
// dispatcher's pool view reads the new producer (llm-d's own token
// counts), not the old one's (the host's token accounting).
func TestFlowPoolSaturationFollowsReloadedProducer(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(strings.Replace(reloadProducerConfig, "ACCT", "gie", 1)), 0o600))
	s, err := New(Config{EndpointsFile: endpointsFile(t, 4), ConfigFile: cfgFile, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	defer s.closeListeners()
	defer s.closeConfig()
	first := s.gen.Load()
	pool := first.flow.pool
	cands := s.store.Snapshot().Routable()
	require.Len(t, cands, 4)
	st, ok := datastore.StatsKey.Get(cands[0])
	require.True(t, ok)
	st.Start(40) // the host accounts 40 tokens in flight on e0
	sat, _ := pool.Saturation()
	assert.InDelta(t, 40.0/400, sat, 1e-12, "gie: the host's token accounting")

	require.NoError(t, os.WriteFile(cfgFile, []byte(strings.Replace(reloadProducerConfig, "ACCT", "llm-d", 1)), 0o600))
	require.NoError(t, s.Reload())
	second := s.gen.Load()
	require.Same(t, first.loaded.Plugins["concurrency-detector"], second.loaded.Plugins["concurrency-detector"], "the detector is kept")
	require.NotSame(t, first.loaded.Plugins["inflight-load-producer"], second.loaded.Plugins["inflight-load-producer"], "the producer is new")
	sat, _ = pool.Saturation()
	assert.Zero(t, sat, "llm-d: the new producer's own token counts (none yet), not the host's")

	prod, ok := second.loaded.Plugins["inflight-load-producer"].(scheduling.PreRequest)
	require.True(t, ok)
	res := &scheduling.Result{PrimaryProfile: "default", ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: []*scheduling.Endpoint{cands[1]}}}}
	prod.PreRequest(context.Background(), &scheduling.Request{PromptTokens: 20}, res)
	sat, _ = pool.Saturation()
	assert.InDelta(t, 20.0/400, sat, 1e-12, "llm-d: the new producer's charge")
}
