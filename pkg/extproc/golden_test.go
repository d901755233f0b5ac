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
		// conformance turns on Options.ConformanceTestHeaders.
		conformance bool
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
			name:        "conformance selection header",
			pods:        threePods(),
			conformance: true,
			msgs:        []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "test-epp-endpoint-selection", "127.10.0.3"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.3:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
			},
		},
		{
			name:        "conformance selection header naming no endpoint",
			pods:        threePods(),
			conformance: true,
			msgs:        []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "test-epp-endpoint-selection", "127.99.0.1:8000"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{immediate(503, "subset_no_match", "ServiceUnavailable",
				"the test-epp-endpoint-selection header matches no ready endpoint")},
		},
		{
			// The scheduler picks 127.10.0.1 (lowest queue); the header asks
			// for .3 and is not obeyed, and it does not reach the upstream.
			name: "default options: selection header ignored and removed",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "test-epp-endpoint-selection", "127.10.0.3:8000"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				removing(routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))), "test-epp-endpoint-selection"),
				reqBodyResp(completion, true),
			},
		},
		{
			name: "default options: unknown address in the selection header is no 503",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "test-epp-endpoint-selection", "127.99.0.1:8000"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				removing(routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))), "test-epp-endpoint-selection"),
				reqBodyResp(completion, true),
			},
		},
		{
			name: "default options: header-only request ignores the selection header",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{withSubset(hdrs(true, ":method", "GET", ":path", "/v1/models", "x-request-id", "req-1",
				"test-epp-endpoint-selection", "127.10.0.1:8000"), list("127.10.0.3:8000"))},
			want: []*extprocv3.ProcessingResponse{removing(routed("127.10.0.3:8000"), "test-epp-endpoint-selection")},
		},
		{
			name: "default options: no served echo",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders("/v1/completions"), body(completion, true),
				respHeaders("127.10.0.1:8000", false, ":status", "200", "content-type", "application/json"),
				respBody(`{"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`, true),
			},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
				respHeadersResp(),
				respBodyResp(`{"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`, true),
			},
		},
		{
			name:   "default options: header-based-testing-filter still reads the header",
			config: headerFilterConfig,
			pods:   threePods(),
			msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "test-epp-endpoint-selection", "127.10.0.3:8000"), body(completion, true)},
			want: []*extprocv3.ProcessingResponse{
				removing(routed("127.10.0.3:8000", hv("content-length", strconv.Itoa(len(completion)))), "test-epp-endpoint-selection"),
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
			name:        "response JSON is buffered; the empty end-of-stream chunk ends it; model name rewritten back",
			pods:        threePods(),
			conformance: true,
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
			name:        "SSE response streams chunk by chunk",
			pods:        threePods(),
			conformance: true,
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
		{
			name: "POST with end_of_stream on the headers is parsed: an empty body is a bad request",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{hdrs(true, ":method", "POST", ":path", "/v1/completions", "x-request-id", "req-1")},
			want: []*extprocv3.ProcessingResponse{immediate(400, "bad_request", "BadRequest", emptyBodyMessage)},
		},
		{
			name: "end_of_stream on headers without a method is parsed too",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{hdrs(true, ":path", "/v1/completions", "x-request-id", "req-1")},
			want: []*extprocv3.ProcessingResponse{immediate(400, "bad_request", "BadRequest", emptyBodyMessage)},
		},
		{
			// Not an inference API (vLLM's cancel, sleep, reset_prefix_cache):
			// routed as a request without body, here to the one endpoint the
			// subset hint allows.
			name: "POST without body to a non-inference path is routed like a GET",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{withSubset(hdrs(true, ":method", "POST", ":path", "/v1/responses/resp_1/cancel", "x-request-id", "req-1"), list("127.10.0.2:8000"))},
			want: []*extprocv3.ProcessingResponse{routed("127.10.0.2:8000")},
		},
		{
			// Scheduled (lowest queue), not a random pick; no body response
			// follows, since the gateway sent no body.
			name:   "passthrough format: POST without body is scheduled",
			config: passthroughConfig,
			pods:   threePods(),
			msgs:   []*extprocv3.ProcessingRequest{hdrs(true, ":method", "POST", ":path", "/upload", "x-request-id", "req-1")},
			want:   []*extprocv3.ProcessingResponse{routed("127.10.0.1:8000")},
		},
		{
			name:        "header-only GET: the response is passed through",
			pods:        threePods(),
			conformance: true,
			msgs: []*extprocv3.ProcessingRequest{
				withSubset(hdrs(true, ":method", "GET", ":path", "/v1/models", "x-request-id", "req-1"), list("127.10.0.3:8000")),
				respHeaders("127.10.0.3:8000", false, ":status", "200", "content-type", "application/json"),
				respBody(`{"data":[`, false),
				respBody(`]}`, true),
			},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.3:8000"),
				respHeadersResp(hv("x-conformance-test-served-endpoint", "127.10.0.3:8000")),
				respBodyResp(`{"data":[`, false),
				respBodyResp(`]}`, true),
			},
		},
		{
			name: "request trailers end a body",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, false), reqTrailers()},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, false),
				{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}},
			},
		},
		{
			name: "protocol: trailers-only stream",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqTrailers()},
			want: []*extprocv3.ProcessingResponse{immediate(400, "protocol_error", "BadRequest", "request trailers received before request headers or after the request ended")},
		},
		{
			name: "protocol: request trailers after the body ended",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true), reqTrailers()},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
				immediate(400, "protocol_error", "BadRequest", "request trailers received before request headers or after the request ended"),
			},
		},
		{
			name: "protocol: response headers before any request",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{respHeaders("127.10.0.1:8000", false, ":status", "200")},
			want: []*extprocv3.ProcessingResponse{immediate(400, "protocol_error", "BadRequest", "response headers received before the request headers")},
		},
		{
			// Envoy runs its local replies (a timeout while the request
			// was still arriving) through the response path: passed
			// through, not refused.
			name: "proxy's local reply while the request body is incomplete",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion[:10], false),
				respHeaders("", false, ":status", "408"), respBody(`{"error":"request timeout"}`, true)},
			want: []*extprocv3.ProcessingResponse{respHeadersResp(), respBodyResp(`{"error":"request timeout"}`, true)},
		},
		{
			name: "protocol: response body before any request",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{respBody("x", true)},
			want: []*extprocv3.ProcessingResponse{immediate(400, "protocol_error", "BadRequest", "response body received before response headers")},
		},
		{
			name: "protocol: response trailers before any request",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}},
			want: []*extprocv3.ProcessingResponse{immediate(400, "protocol_error", "BadRequest", "response trailers received before response headers")},
		},
		{
			name: "protocol: response body before response headers",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true), respBody(`{"ok":true}`, true)},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
				immediate(400, "protocol_error", "BadRequest", "response body received before response headers"),
			},
		},
		{
			name: "protocol: response trailers before response headers",
			pods: threePods(),
			msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true),
				{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}},
			want: []*extprocv3.ProcessingResponse{
				routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))),
				reqBodyResp(completion, true),
				immediate(400, "protocol_error", "BadRequest", "response trailers received before response headers"),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.config
			if cfg == "" {
				cfg = queueConfig
			}
			h := start(t, cfg, tc.pods, func(o *extproc.Options) {
				o.MaxRequestBodyBytes = tc.maxBody
				o.ConformanceTestHeaders = tc.conformance
			})
			got := h.exchange(t, tc.msgs, len(tc.want))
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Fatalf("responses (-want +got):\n%s", diff)
			}
			// Every scheduled request completed: nothing stays counted.
			require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
		})
	}
}

// The request parser's messages for the two GIE error cases, and for an
// empty body.
const (
	invalidJSONMessage  = "body is not valid JSON: unexpected end of JSON input (at byte offset 9)"
	missingModelMessage = "model: is required"
	emptyBodyMessage    = "body is empty"
)

const headerFilterConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: header-based-testing-filter
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: header-based-testing-filter
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`

const passthroughConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: passthrough-parser
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
parser:
  pluginRef: passthrough-parser
`
