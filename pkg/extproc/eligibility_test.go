package extproc_test

import (
	"strconv"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/callerscope"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/servedmodel"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// The request path reads the store's Routable set: an endpoint a health
// check or a circuit breaker took out is never a candidate, even when it
// is the best by every scorer and its metrics are fresh (Ready still
// lists it). When every endpoint is out, the request is refused with 503.
func TestCandidatesAreRoutable(t *testing.T) {
	store := datastore.New(datastore.Options{})
	require.NoError(t, store.Replace([]datastore.EndpointSpec{
		{Name: "pod-1", Address: "127.10.0.1", Port: 8000},
		{Name: "pod-2", Address: "127.10.0.2", Port: 8000},
		{Name: "pod-3", Address: "127.10.0.3", Port: 8000},
	}))
	targets, _ := store.Targets()
	for i, tg := range targets {
		// pod-1 has the shortest queue: the queue scorer's favourite.
		store.ReportScrape(tg.ID, datastore.ScrapeResult{Metrics: scheduling.Metrics{WaitingQueueSize: i * 5}})
	}
	store.Flush()
	healthOf := func(name string) *scheduling.EndpointHealth {
		e, _ := store.Snapshot().Lookup(name)
		h, _ := scheduling.HealthKey.Get(e)
		return h
	}
	h := start(t, queueConfig, nil, func(o *extproc.Options) {
		o.Endpoints = func() extproc.EndpointView { return store.Snapshot() }
	})
	same := func(t *testing.T, want, got any, msg string) {
		t.Helper()
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", msg, diff)
		}
	}
	routesTo := func(dest, msg string) {
		t.Helper()
		out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true)}, 2)
		require.NotEmpty(t, out)
		same(t, routed(dest, hv("content-length", strconv.Itoa(len(completion)))), out[0], msg)
	}
	routesTo("127.10.0.1:8000", "the favourite while eligible")

	healthOf("pod-1").SetProbe(scheduling.ProbeUnhealthy)
	store.Flush()
	require.Len(t, store.Snapshot().Ready(), 3, "Ready keeps its meaning: fresh metrics")
	for range 10 {
		routesTo("127.10.0.2:8000", "never the unhealthy endpoint")
	}

	healthOf("pod-2").SetProbe(scheduling.ProbeUnhealthy)
	healthOf("pod-3").SetProbe(scheduling.ProbeUnhealthy)
	store.Flush()
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true)}, 1)
	same(t, []*extprocv3.ProcessingResponse{immediate(503, "no_endpoints", "ServiceUnavailable",
		"no routable endpoint: all 3 endpoints of the pool are out of rotation (health check failed or circuit breaker open)")}, out, "nothing routable")
}

// Through the real stream: served-model-filter's 404 carries OpenAI's
// error code, an alias is forwarded as the served name, and
// caller-scope-filter's 403 its permission error.
func TestEligibilityRefusalsAndAlias(t *testing.T) {
	const cfg = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: served-model-filter
- type: caller-scope-filter
  parameters:
    callers:
      nobody: {allowedEndpoints: []}
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: served-model-filter
  - pluginRef: caller-scope-filter
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`
	eps := []*scheduling.Endpoint{
		scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "pod-1", Address: "127.10.0.1", Port: 8000}, scheduling.Metrics{},
			map[string]any{scheduling.ModelsKey.Name(): &scheduling.EndpointModels{Entries: []scheduling.ModelEntry{{Name: "food-review-served", Aliases: []string{"food-review"}}}}}),
	}
	h := start(t, cfg, eps)
	same := func(want, got any, msg string) {
		t.Helper()
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", msg, diff)
		}
	}
	served := `{"model":"food-review-served","prompt":"test prompt","max_tokens":20}`
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true)}, 2)
	same([]*extprocv3.ProcessingResponse{
		routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(served)))),
		reqBodyResp(served, true),
	}, out, "the alias is forwarded as the served name")

	out = h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":"gpt-9","prompt":"x"}`, true)}, 1)
	require.Len(t, out, 1)
	imm := out[0].GetImmediateResponse()
	require.NotNil(t, imm)
	require.EqualValues(t, 404, imm.GetStatus().GetCode())
	require.JSONEq(t, `{"error":{"message":"The model \"gpt-9\" does not exist or is not served by this pool; served models: food-review-served","type":"invalid_request_error","param":null,"code":"model_not_found"}}`, string(imm.GetBody()))

	out = h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-switchyard-caller", "nobody"), body(completion, true)}, 1)
	require.Len(t, out, 1)
	imm = out[0].GetImmediateResponse()
	require.NotNil(t, imm)
	require.EqualValues(t, 403, imm.GetStatus().GetCode())
	require.JSONEq(t, `{"error":{"message":"caller \"nobody\" may use none of the 1 endpoints that can serve the request","type":"permission_error","param":null,"code":"caller_not_allowed"}}`, string(imm.GetBody()))
	require.Equal(t, servedmodel.ReasonModelNotFound, extproc.ReasonModelNotFound)
	require.Equal(t, callerscope.ReasonCallerNotAllowed, extproc.ReasonCallerNotAllowed)
}
