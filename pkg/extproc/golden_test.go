package extproc_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func immediate(status int, reason, errType, message string) *extprocv3.ProcessingResponse {
	raw := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
	}
	set := []*corev3.HeaderValueOption{raw("content-type", "application/json"), raw("x-switchyard-reason", reason)}
	if status == 429 || status == 503 {
		set = append(set, raw("retry-after", "1"))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: set},
			Body:    []byte(`{"error":{"message":` + strconv.Quote(message) + `,"type":"` + errType + `","param":null,"code":` + strconv.Itoa(status) + `}}`),
			Details: "switchyard: " + reason + " (" + strconv.Itoa(status) + ")",
		},
	}}
}

// threePods: queue lengths make 127.10.0.1 the best, then .2, then .3;
// free KV cache ranks them the other way round.
func threePods() []*scheduling.Endpoint {
	return []*scheduling.Endpoint{
		endpoint("pod-1", "127.10.0.1", 8000, scheduling.Metrics{WaitingQueueSize: 0, KVCacheUsagePercent: 0.9}),
		endpoint("pod-2", "127.10.0.2", 8000, scheduling.Metrics{WaitingQueueSize: 5, KVCacheUsagePercent: 0.1}),
		endpoint("pod-3", "127.10.0.3", 8000, scheduling.Metrics{WaitingQueueSize: 10, KVCacheUsagePercent: 0.05}),
	}
}

const loraConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: lora-affinity-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: lora-affinity-scorer
    weight: 5
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: max-score-picker
`

const (
	completion = `{"model":"food-review","prompt":"test prompt","max_tokens":20}`
	sseRequest = `{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}`
)

// TestGolden replays GIE's integration cases (reference/gie-epp.md §9) and
// asserts the exact ProcessingResponse sequence.
func TestGolden(t *testing.T) {
	loraPods := []*scheduling.Endpoint{
		endpoint("pod-a", "127.10.0.1", 8000, scheduling.Metrics{KVCacheUsagePercent: 0.9, ActiveModels: map[string]int{"food-review": 1}, MaxActiveModels: 2}),
		endpoint("pod-b", "127.10.0.2", 8000, scheduling.Metrics{KVCacheUsagePercent: 0.1, ActiveModels: map[string]int{}, MaxActiveModels: 2}),
	}
	big := `{"model":"m","prompt":"` + strings.Repeat("x", 70000) + `"}`
	tests := []struct {
		name   string
		config string
		pods   []*scheduling.Endpoint
		msgs   []*extprocv3.ProcessingRequest
		want   []*extprocv3.ProcessingResponse
		// maxBody is --max-request-body-bytes (0: the default).
		maxBody int64
	}{
		{
			name: "select lowest queue",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
			},
		},
		{
			name:   "LoRA affinity beats KV cache",
			config: loraConfig,
			pods:   loraPods,
			msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
			},
		},
		{
			name: "body split across chunks",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion[:10], false), body(completion[10:30], false), body(completion[30:], true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
			},
		},
		{
			name: "body larger than one chunk comes back in 62,000-byte chunks",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(big[:40000], false), body(big[40000:], true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(big)))),
				reqBodyResp(big[:62000], false),
				reqBodyResp(big[62000:], true),
			},
		},
		{
			name: "invalid JSON",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":`, true)},
			want: []*extprocv3.ProcessingResponse{immediate(400, "bad_request", "BadRequest", invalidJSONMessage)},
		},
		{
			name: "missing model",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"prompt":"hi"}`, true)},
			want: []*extprocv3.ProcessingResponse{immediate(400, "bad_request", "BadRequest", missingModelMessage)},
		},
		{
			name: "header-only request, no pods",
			pods: nil,
			msgs: []*extprocv3.ProcessingRequest{hdrs(true, ":method", "GET", ":path", "/v1/models", "x-request-id", "req-1")},
			want: []*extprocv3.ProcessingResponse{immediate(503, "no_endpoints", "ServiceUnavailable", "no ready endpoints in the pool")},
		},
		{
			name: "header-only request goes to the one subset endpoint",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{withSubset(hdrs(true, ":method", "GET", ":path", "/v1/models", "x-request-id", "req-1"), list("127.10.0.3:8000"))},
			want: []*extprocv3.ProcessingResponse{routed("127.10.0.3:8000")},
		},
		{
			name: "subset: best of the listed endpoints",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{withSubset(reqHeaders("/v1/completions"), list("127.10.0.2:8000", "127.10.0.3:8000")), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.2:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
			},
		},
		{
			name: "subset: partial match, comma string, bare IP",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{withSubset(reqHeaders("/v1/completions"), structpb.NewStringValue("127.10.0.3, 127.99.0.1:8000")), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.3:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
			},
		},
		{
			name: "subset: ip:port must match the port",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{withSubset(reqHeaders("/v1/completions"), list("127.10.0.1:9999")), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{immediate(503, "subset_no_match", "ServiceUnavailable",
				"failed to find endpoint candidates for serving the request: the subset hint matches no ready endpoint")},
		},
		{
			name: "subset: empty list matches nothing",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{withSubset(reqHeaders("/v1/completions"), list()), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{immediate(503, "subset_no_match", "ServiceUnavailable",
				"failed to find endpoint candidates for serving the request: the subset hint matches no ready endpoint")},
		},
		{
			name: "conformance selection header",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "test-epp-endpoint-selection", "127.10.0.3"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.3:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
			},
		},
		{
			name: "model rewrite header",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-gateway-model-name-rewrite", "food-review-v2"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)+3))),
				reqBodyResp(`{"model":"food-review-v2","prompt":"test prompt","max_tokens":20}`, true),
			},
		},
		{
			name: "response JSON is buffered; the empty end-of-stream chunk ends it; model name rewritten back",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders("/v1/completions", "x-gateway-model-name-rewrite", "food-review-v2"), body(completion, true),
				respHeaders("127.10.0.1:8000", false, ":status", "200", "content-type", "application/json"),
				respBody(`{"id":"c1","model":"food-review-v2","choices":[{"text":"ok"}],`, false),
				respBody(`"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`, false),
				respBody("", true),
			},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)+3))),
				reqBodyResp(`{"model":"food-review-v2","prompt":"test prompt","max_tokens":20}`, true),
				respHeadersResp(hv("x-conformance-test-served-endpoint", "127.10.0.1:8000")),
				respBodyResp(`{"id":"c1","model":"food-review","choices":[{"text":"ok"}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`, true),
			},
		},
		{
			name: "SSE response streams chunk by chunk",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders("/v1/completions"), body(sseRequest, true),
				respHeaders("127.10.0.1:8000", false, ":status", "200", "content-type", "text/event-stream"),
				respBody("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", false),
				respBody("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n", true),
			},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(sseRequest)))),
				reqBodyResp(sseRequest, true),
				respHeadersResp(hv("x-conformance-test-served-endpoint", "127.10.0.1:8000")),
				respBodyResp("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", false),
				respBodyResp("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n", true),
			},
		},
		{
			name: "response trailers end a gRPC-style response",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders("/v1/completions"), body(completion, true),
				respHeaders("", false, ":status", "200"),
				respBody(`{"ok":true}`, false),
				{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}},
			},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
				respHeadersResp(),
				respBodyResp(`{"ok":true}`, false),
				{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}},
			},
		},
		{
			name:    "body over the limit",
			pods:    threePods(),
			msgs:    []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(strings.Repeat("x", 600), false)},
			want:    []*extprocv3.ProcessingResponse{immediate(413, "body_too_large", "RequestEntityTooLarge", "request body exceeds the limit of 512 bytes")},
			maxBody: 512,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.config
			if cfg == "" {
				cfg = queueConfig
			}
			h := start(t, cfg, tc.pods, func(o *extproc.Options) { o.MaxRequestBodyBytes = tc.maxBody })
			got := h.exchange(t, tc.msgs, len(tc.want))
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Fatalf("responses (-want +got):\n%s", diff)
			}
			// Every scheduled request completed: nothing stays counted.
			require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
		})
	}
}

// The request parser's messages for the two GIE error cases.
const (
	invalidJSONMessage  = "body is not valid JSON: unexpected end of JSON input (at byte offset 9)"
	missingModelMessage = "model: is required"
)
