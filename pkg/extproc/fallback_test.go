package extproc_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/plugins/admitter/kvsaturation"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/servedmodel"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

const fallbackConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: served-model-filter
- type: kv-saturation-admitter
  parameters:
    scrapeInterval: 1m
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: served-model-filter
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`

// modelEndpoint serves model at 127.10.0.<ip>:8000 with a KV usage
// scraped now.
func modelEndpoint(name, ip, model string, kv float64) *scheduling.Endpoint {
	return scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: name, Address: ip, Port: 8000},
		scheduling.Metrics{KVCacheUsagePercent: kv, UpdateTime: time.Now()},
		map[string]any{scheduling.ModelsKey.Name(): &scheduling.EndpointModels{Entries: []scheduling.ModelEntry{{Name: model}}}})
}

func fallbackCount(t *testing.T, reg *prometheus.Registry, trigger, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != extproc.FallbackMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["trigger"] == trigger && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func startFallback(t *testing.T, eps []*scheduling.Endpoint, chains map[string][]string) (*harness, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	fm, err := extproc.NewFallbackMetrics(reg)
	require.NoError(t, err)
	h := start(t, fallbackConfig, eps, func(o *extproc.Options) { o.FallbackMetrics = fm })
	rt := *h.rt.Load()
	rt.FallbackChains = chains
	h.setRuntime(&rt)
	return h, reg
}

func fallbackHeaderOf(r *extprocv3.ProcessingResponse) string {
	for _, o := range r.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == extproc.FallbackModelHeader {
			return string(o.GetHeader().GetRawValue())
		}
	}
	return ""
}

// C-35 with fallback chains, through the real gRPC stream: a request for
// a model whose every engine is KV-saturated is 503 admission_reject with
// Retry-After; with a chain it is scheduled for the first model of the
// chain that admits it, the body's model rewritten, and the response
// names the model.
func TestC35_FallbackChainMovesASaturatedModel(t *testing.T) {
	eps := []*scheduling.Endpoint{
		modelEndpoint("big-0", "127.10.0.1", "big", 0.99),
		modelEndpoint("big-1", "127.10.0.2", "big", 1),
		modelEndpoint("mid-0", "127.10.0.3", "mid", 0.995),
		modelEndpoint("small-0", "127.10.0.4", "small", 0.2),
	}
	const reqBody = `{"model":"big","prompt":"hello","max_tokens":5}`

	// Without a chain: refused.
	h, _ := startFallback(t, eps, nil)
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(reqBody, true)}, 1)
	require.Len(t, out, 1)
	imm := out[0].GetImmediateResponse()
	require.NotNil(t, imm, "want a refusal, got %v", out[0])
	require.EqualValues(t, 503, imm.GetStatus().GetCode())
	got := map[string]string{}
	for _, o := range imm.GetHeaders().GetSetHeaders() {
		got[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	require.Equal(t, kvsaturation.ReasonAdmissionReject, got[extproc.ReasonHeader])
	require.Equal(t, "1", got["retry-after"])

	// With big → [mid, small]: mid is saturated too, small serves.
	h, reg := startFallback(t, eps, map[string][]string{"big": {"mid", "small"}})
	out = h.exchange(t, []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/completions"), body(reqBody, true),
		respHeaders("127.10.0.4:8000", false, ":status", "200"),
		respBody(`{"model":"small","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, true),
	}, 4)
	rewritten := `{"model":"small","prompt":"hello","max_tokens":5}`
	require.Len(t, out, 4)
	require.Equal(t, "127.10.0.4:8000", destinationOf(out[0]))
	require.Equal(t, strconv.Itoa(len(rewritten)), setHeaderOf(out[0], "content-length"))
	require.Equal(t, rewritten, string(out[1].GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()))
	require.Equal(t, "small", fallbackHeaderOf(out[2]))
	require.Equal(t, 1.0, fallbackCount(t, reg, "admission_reject", "served"))
	require.True(t, h.counters.allZero(), "the fallback request completed once")

	// A request that needs no fallback carries no header.
	out = h.exchange(t, []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/completions"), body(`{"model":"small","prompt":"x"}`, true),
		respHeaders("127.10.0.4:8000", true, ":status", "200"),
	}, 3)
	require.Len(t, out, 3)
	require.Equal(t, "", fallbackHeaderOf(out[2]))

	// A chain that ends refuses with the first refusal.
	h, reg = startFallback(t, eps, map[string][]string{"big": {"mid"}})
	out = h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(reqBody, true)}, 1)
	require.EqualValues(t, 503, out[0].GetImmediateResponse().GetStatus().GetCode())
	require.Equal(t, 1.0, fallbackCount(t, reg, "admission_reject", "exhausted"))
}

// C-35: a chain that ends refuses as before. big is saturated and its
// only fallback serves nowhere: the client asked for big, so it gets big's
// retryable 503 admission_reject with Retry-After, not the fallback
// model's 404 model_not_found.
func TestC35_ExhaustedChainRefusesAsBefore(t *testing.T) {
	eps := []*scheduling.Endpoint{
		modelEndpoint("big-0", "127.10.0.1", "big", 0.99),
		modelEndpoint("small-0", "127.10.0.4", "small", 0.2),
	}
	h, reg := startFallback(t, eps, map[string][]string{"big": {"nowhere"}})
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":"big","prompt":"hello"}`, true)}, 1)
	require.Len(t, out, 1)
	imm := out[0].GetImmediateResponse()
	require.NotNil(t, imm, "want a refusal, got %v", out[0])
	require.EqualValues(t, 503, imm.GetStatus().GetCode())
	got := map[string]string{}
	for _, o := range imm.GetHeaders().GetSetHeaders() {
		got[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	require.Equal(t, kvsaturation.ReasonAdmissionReject, got[extproc.ReasonHeader])
	require.Equal(t, "1", got["retry-after"])
	require.Contains(t, string(imm.GetBody()), "KV-cache usage")
	require.NotContains(t, string(imm.GetBody()), "nowhere")
	require.Equal(t, 1.0, fallbackCount(t, reg, "admission_reject", "exhausted"))
}

// The served-model-filter's model_not_found moves a request along its
// chain too, and a non-retryable refusal (or none) does not.
func TestFallbackChain_ModelNotFound(t *testing.T) {
	eps := []*scheduling.Endpoint{modelEndpoint("small-0", "127.10.0.4", "small", 0.2)}
	h, reg := startFallback(t, eps, map[string][]string{"gone": {"nowhere", "small"}})
	out := h.exchange(t, []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/completions"), body(`{"model":"gone","prompt":"x"}`, true),
		respHeaders("127.10.0.4:8000", true, ":status", "200"),
	}, 3)
	require.Len(t, out, 3)
	require.Equal(t, "127.10.0.4:8000", destinationOf(out[0]))
	require.Equal(t, "small", fallbackHeaderOf(out[2]))
	require.Equal(t, 1.0, fallbackCount(t, reg, "model_not_found", "served"))

	// A bad body is not a scheduling refusal: no chain.
	out = h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":`, true)}, 1)
	require.EqualValues(t, 400, out[0].GetImmediateResponse().GetStatus().GetCode())
}

// The trigger names are the plugins' reasons, and the label sets closed.
func TestFallbackTriggersArePluginReasons(t *testing.T) {
	require.Equal(t, kvsaturation.ReasonAdmissionReject, extproc.FallbackTriggerAdmissionReject)
	require.Equal(t, servedmodel.ReasonModelNotFound, extproc.FallbackTriggerModelNotFound)
	require.Equal(t, servedmodel.ReasonModelUnavailable, extproc.FallbackTriggerModelUnavailable)
	reg := prometheus.NewRegistry()
	_, err := extproc.NewFallbackMetrics(reg)
	require.NoError(t, err)
	_, err = extproc.NewFallbackMetrics(reg) // a second server on the same registry reuses it
	require.NoError(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var series []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			series = append(series, labelString(m))
		}
	}
	require.ElementsMatch(t, []string{
		"outcome=exhausted,trigger=admission_reject", "outcome=served,trigger=admission_reject",
		"outcome=exhausted,trigger=model_not_found", "outcome=served,trigger=model_not_found",
		"outcome=exhausted,trigger=model_unavailable", "outcome=served,trigger=model_unavailable",
	}, series)
}

func labelString(m *dto.Metric) string {
	s := ""
	for i, l := range m.GetLabel() {
		if i > 0 {
			s += ","
		}
		s += l.GetName() + "=" + l.GetValue()
	}
	return s
}

func destinationOf(r *extprocv3.ProcessingResponse) string {
	return setHeaderOf(r, extproc.DestinationHeader)
}

func setHeaderOf(r *extprocv3.ProcessingResponse, name string) string {
	for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == name {
			return string(o.GetHeader().GetRawValue())
		}
	}
	return ""
}

// BenchmarkFallbackPath is the whole request path over real gRPC when
// every request takes its fallback chain: 1000 endpoints, 500 of a
// KV-saturated model, 500 of its fallback model; admission refuses the
// first attempt and the second is scheduled.
func BenchmarkFallbackPath(b *testing.B) {
	eps := make([]*scheduling.Endpoint, 1000)
	for i := range eps {
		model, kv := "big", 0.99
		if i%2 == 1 {
			model, kv = "small", 0.3
		}
		eps[i] = modelEndpoint(fmt.Sprintf("pod-%d", i), fmt.Sprintf("127.10.%d.%d", i/250, i%250+1), model, kv)
	}
	reg := prometheus.NewRegistry()
	fm, err := extproc.NewFallbackMetrics(reg)
	require.NoError(b, err)
	h := start(b, fallbackConfig, eps, func(o *extproc.Options) { o.FallbackMetrics = fm })
	rt := *h.rt.Load()
	rt.FallbackChains = map[string][]string{"big": {"small"}}
	h.setRuntime(&rt)
	msgs := []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/completions"),
		body(`{"model":"big","prompt":"hello there","max_tokens":8}`, true),
		respHeaders("", false, ":status", "200", "content-type", "application/json"),
		respBody(`{"id":"x","model":"small","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":8,"total_tokens":11}}`, true),
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := oneRequest(ctx, h.client, msgs); err != nil {
			b.Fatal(err)
		}
	}
}
