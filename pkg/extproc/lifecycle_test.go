package extproc_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// A client that goes away mid-response (the gateway cancels the stream)
// still completes the request: in-flight counts return to zero.
func TestDisconnectMidStreamCompletes(t *testing.T) {
	h := start(t, string(configfiles.Default), threePods())
	for _, stage := range []string{"after routing", "after response headers", "mid body"} {
		t.Run(stage, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			stream, err := h.client.Process(ctx)
			require.NoError(t, err)
			require.NoError(t, stream.Send(reqHeaders("/v1/chat/completions")))
			require.NoError(t, stream.Send(body(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`, true)))
			for range 2 { // header and body responses
				_, err := stream.Recv()
				require.NoError(t, err)
			}
			if stage != "after routing" {
				require.NoError(t, stream.Send(respHeaders("127.10.0.1:8000", false, ":status", "200", "content-type", "text/event-stream")))
				_, err := stream.Recv()
				require.NoError(t, err)
			}
			if stage == "mid body" {
				require.NoError(t, stream.Send(respBody("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", false)))
				_, err := stream.Recv()
				require.NoError(t, err)
			}
			reqs, _ := h.counters.totalInFlight()
			require.Equal(t, int64(1), reqs, "counted while in flight")
			cancel()
			require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
		})
	}
}

// When the gateway reports that a fallback endpoint served, the
// accounting moves to it.
func TestServedFallbackMovesAccounting(t *testing.T) {
	const twoTargets = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
  parameters:
    maxNumOfEndpoints: 2
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`
	h := start(t, twoTargets, threePods())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := h.client.Process(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(reqHeaders("/v1/completions")))
	require.NoError(t, stream.Send(body(completion, true)))
	first, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, routed("127.10.0.1:8000,127.10.0.2:8000", hv("content-length", strconv.Itoa(len(completion)))).String(), first.String())
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, int64(1), h.counters.get("127.10.0.1:8000").inFlight.Load())

	require.NoError(t, stream.Send(respHeaders("127.10.0.2:8000", false, ":status", "200")))
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, int64(0), h.counters.get("127.10.0.1:8000").inFlight.Load())
	require.Equal(t, int64(1), h.counters.get("127.10.0.2:8000").inFlight.Load())

	require.NoError(t, stream.Send(respBody(`{"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, true)))
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, int64(0), h.counters.get("127.10.0.2:8000").inFlight.Load())
	require.Equal(t, int64(1), h.counters.get("127.10.0.2:8000").ok.Load())

	// A served endpoint reported again after the end changes nothing.
	require.NoError(t, stream.Send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}},
		MetadataContext: lbMetadata(extproc.LBNamespace, extproc.ServedKey, structpb.NewStringValue("127.10.0.3:8000")),
	}))
	_, err = stream.Recv()
	require.NoError(t, err)
	require.True(t, h.counters.allZero())
}

// recorder reports each completion: the request id, and the response.
type recorder struct {
	name      string
	completed chan string
	responses chan scheduling.Response
}

func (r *recorder) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "recorder", Name: r.name}
}
func (r *recorder) ResponseComplete(_ context.Context, req *scheduling.Request, resp *scheduling.Response, _ *scheduling.Endpoint) {
	r.completed <- req.ID
	if r.responses != nil {
		r.responses <- *resp
	}
}

// A request refused before scheduling is never counted.
func TestRefusedRequestIsNotCounted(t *testing.T) {
	h := start(t, queueConfig, threePods())
	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`not json`, true)}, 1)
	require.NotNil(t, got[0].GetImmediateResponse())
	reqs, _ := h.counters.totalInFlight()
	require.Zero(t, reqs)
}

// The runtime is read once per request: a configuration swapped while a
// request is in flight takes over from the next request, and the request
// completes on the scheduler that scheduled it.
func TestRuntimeSwapTakesOverFromNextRequest(t *testing.T) {
	h := start(t, queueConfig, threePods())
	// Start a request on the old configuration (lowest queue: pod-1).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := h.client.Process(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(reqHeaders("/v1/completions")))
	require.NoError(t, stream.Send(body(completion, true)))
	first, err := stream.Recv()
	require.NoError(t, err)
	require.Contains(t, first.String(), "127.10.0.1:8000")
	_, err = stream.Recv()
	require.NoError(t, err)

	// The new configuration prefers free KV cache (pod-3) and records
	// completions.
	completed := make(chan string, 4)
	loaded := loadWithRecorder(t, kvRecorderConfig, &recorder{completed: completed})
	h.setRuntime(&extproc.Runtime{Scheduler: loaded.Scheduler, Format: "openai"})

	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-request-id", "req-2"), body(completion, true)}, 2)
	require.Contains(t, got[0].String(), "127.10.0.3:8000", "the new configuration routes the next request")
	require.Equal(t, "req-2", <-completed)

	// The old request completes on the old scheduler: the recorder never
	// sees req-1.
	require.NoError(t, stream.Send(respHeaders("", true, ":status", "200")))
	_, err = stream.Recv()
	require.NoError(t, err)
	select {
	case id := <-completed:
		t.Fatalf("unexpected completion of %s on the new configuration", id)
	case <-time.After(50 * time.Millisecond):
	}
	require.Eventually(t, func() bool { r, _ := h.counters.totalInFlight(); return r == 0 }, 5*time.Second, 5*time.Millisecond)
}

const kvRecorderConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: kv-cache-utilization-scorer
- type: max-score-picker
- type: recorder
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: max-score-picker
`

// loadWithRecorder loads a configuration whose "recorder" plugin is rec.
func loadWithRecorder(t *testing.T, doc string, rec *recorder) *config.Loaded {
	t.Helper()
	reg := plugins.InTree().MustRegister(scheduling.Registration{
		Type: "recorder",
		Factory: scheduling.Typed(func() scheduling.NoParams { return scheduling.NoParams{} },
			func(name string, _ scheduling.NoParams, _ scheduling.Handle) (*recorder, error) {
				rec.name = name
				return rec, nil
			}),
	})
	loaded, err := config.Load([]byte(doc), config.Options{Registry: reg, Registerer: prometheus.NewRegistry(), Seed: 1})
	require.NoError(t, err)
	return loaded
}

// Token usage read from JSON and SSE responses reaches the completion
// hooks, with the status and the served endpoint.
func TestUsageReachesCompletionHooks(t *testing.T) {
	rec := &recorder{completed: make(chan string, 4), responses: make(chan scheduling.Response, 4)}
	h := start(t, queueConfig, threePods())
	h.setRuntime(&extproc.Runtime{Scheduler: loadWithRecorder(t, kvRecorderConfig, rec).Scheduler, Format: "openai"})
	tests := []struct {
		name string
		msgs []*extprocv3.ProcessingRequest
		// n is the number of responses the stream gets.
		n    int
		want scheduling.Usage
	}{
		{
			name: "JSON",
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders("/v1/completions"), body(completion, true),
				respHeaders("127.10.0.3:8000", false, ":status", "200", "content-type", "application/json"),
				respBody(`{"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}`, true),
			},
			n:    4,
			want: scheduling.Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10, CachedTokens: 4},
		},
		{
			name: "SSE split mid-event",
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders("/v1/completions"), body(sseRequest, true),
				respHeaders("127.10.0.3:8000", false, ":status", "200", "content-type", "text/event-stream"),
				respBody("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tok", false),
				respBody("ens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n", true),
			},
			n:    5,
			want: scheduling.Usage{PromptTokens: 3, CompletionTokens: 1, TotalTokens: 4},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.exchange(t, tc.msgs, tc.n)
			<-rec.completed
			resp := <-rec.responses
			require.Equal(t, tc.want, resp.Usage)
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "127.10.0.3:8000", resp.Served)
			require.True(t, resp.EndOfStream)
			require.False(t, resp.Disconnected)
		})
	}
}

const passthroughRecorderConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: passthrough-parser
- type: kv-cache-utilization-scorer
- type: max-score-picker
- type: recorder
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: max-score-picker
parser:
  pluginRef: passthrough-parser
`

// A POST whose headers end the stream is scheduled like any request, not
// sent to a random endpoint: admission runs (a sheddable request is shed
// while the pool is saturated), the profile picks (free KV cache: pod-3,
// every time), and the completion hooks run.
func TestHeaderOnlyPostIsScheduled(t *testing.T) {
	rec := &recorder{completed: make(chan string, 16)}
	h := start(t, queueConfig, threePods(), func(o *extproc.Options) {
		o.Objective = func(name string) (int, bool) { return -1, name == "batch" }
	})
	h.setRuntime(&extproc.Runtime{Scheduler: loadWithRecorder(t, passthroughRecorderConfig, rec).Scheduler, Format: "passthrough"})

	// threePods saturate the pool (the default utilization detector).
	got := h.exchange(t, []*extprocv3.ProcessingRequest{hdrs(true, ":method", "POST", ":path", "/upload", "x-request-id", "shed-me",
		"x-gateway-inference-objective", "batch")}, 1)
	require.Len(t, got, 1)
	require.Equal(t, int32(429), int32(got[0].GetImmediateResponse().GetStatus().GetCode()), "shed: %v", got[0])

	for i := range 10 {
		id := "post-" + strconv.Itoa(i)
		got := h.exchange(t, []*extprocv3.ProcessingRequest{
			hdrs(true, ":method", "POST", ":path", "/upload", "x-request-id", id),
			respHeaders("", true, ":status", "200"),
		}, 2)
		require.Equal(t, routed("127.10.0.3:8000").String(), got[0].String(), "request %d", i)
		require.Equal(t, id, <-rec.completed)
	}
	require.Equal(t, int64(10), h.counters.get("127.10.0.3:8000").started.Load())
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
}

// panicView panics in Routable while armed, as a plugin bug would.
type panicView struct {
	view
	armed atomic.Bool
	// goexit makes the armed view end its goroutine with runtime.Goexit
	// instead of panicking.
	goexit bool
}

func (v *panicView) Routable() []*scheduling.Endpoint {
	if v.armed.Load() {
		if v.goexit {
			runtime.Goexit()
		}
		panic(errViewExploded)
	}
	return v.view.Routable()
}

// errViewExploded is panicView's panic value.
var errViewExploded = errors.New("view exploded")

// failArmedView starts a server whose endpoint view is an armed panicView
// (ending its goroutine with runtime.Goexit when goexit is set), sends one
// request and returns the error its stream ended with.
func failArmedView(t *testing.T, goexit bool, opts ...grpc.ServerOption) (*panicView, *harness, error) {
	t.Helper()
	pods := threePods()
	pv := &panicView{view: view{all: pods, ready: pods}, goexit: goexit}
	h := startGRPC(t, queueConfig, pods, opts, func(o *extproc.Options) {
		o.Endpoints = func() extproc.EndpointView { return pv }
	})
	pv.armed.Store(true)
	st, _ := openStream(t, h)
	require.NoError(t, st.Send(reqHeaders("/v1/completions")))
	require.NoError(t, st.Send(body(completion, true)))
	_, err := recvWithin(t, st, 5*time.Second)
	return pv, h, err
}

// requireNextRouted disarms the view and checks that the server goes on
// routing, with every request's accounting completed.
func requireNextRouted(t *testing.T, pv *panicView, h *harness) {
	t.Helper()
	pv.armed.Store(false)
	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true)}, 2)
	require.Len(t, got, 2)
	require.NotEmpty(t, got[0].GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders(), "the next request is routed")
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
}

// A panic while a message is handled (each stream is served by a goroutine
// of its own) reaches the handler's interceptors as a panic of the handler
// would: the stream fails with their status, the panic keeps the stack
// where it happened, and the server goes on serving.
func TestPanicInStreamReachesInterceptors(t *testing.T) {
	var (
		mu        sync.Mutex
		recovered []any
	)
	recoverer := grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				mu.Lock()
				recovered = append(recovered, r)
				mu.Unlock()
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(srv, ss)
	})
	pv, h, err := failArmedView(t, false, recoverer)
	require.Equal(t, codes.Internal, status.Code(err), "got %v", err)
	mu.Lock()
	require.Len(t, recovered, 1)
	perr, ok := recovered[0].(error)
	mu.Unlock()
	require.True(t, ok, "the recovered value is an error carrying the stack")
	require.Contains(t, perr.Error(), "view exploded")
	require.ErrorIs(t, perr, errViewExploded, "the panic value is reachable with errors.Is")
	require.Contains(t, perr.Error(), "panicked in the stream's serving goroutine")
	require.Contains(t, perr.Error(), "Routable", "the stack is the serving goroutine's")

	requireNextRouted(t, pv, h)
}

// A handler that ends the serving goroutine with runtime.Goexit (neither a
// return nor a panic) fails the stream with Internal instead of leaving
// Process waiting for a result that never comes; the next stream is served.
func TestGoexitInStreamFailsTheStream(t *testing.T) {
	pv, h, err := failArmedView(t, true)
	require.Equal(t, codes.Internal, status.Code(err), "got %v", err)
	require.Contains(t, status.Convert(err).Message(), "exited its goroutine")

	requireNextRouted(t, pv, h)
}

// goexitStats ends the serving goroutine with runtime.Goexit when the first
// token arrives, after the request was forwarded: Process no longer has a
// deadline to end the stream by then, so only the serving goroutine's
// result can.
type goexitStats struct{ *counter }

func (s goexitStats) FirstToken(time.Duration) { runtime.Goexit() }

// A Goexit after the request was forwarded (in a Stats hook, while the
// response streams) fails the stream with Internal too, and the request's
// accounting still completes exactly once.
func TestGoexitAfterForwardingFailsTheStream(t *testing.T) {
	pods := threePods()
	h := startGRPC(t, queueConfig, pods, nil, func(o *extproc.Options) {
		counted := o.Stats
		o.Stats = func(e *scheduling.Endpoint) extproc.Stats { return goexitStats{counted(e).(*counter)} }
	})

	st, _ := openStream(t, h)
	require.NoError(t, st.Send(reqHeaders("/v1/completions")))
	require.NoError(t, st.Send(body(sseRequest, true)))
	for range 2 {
		_, err := recvWithin(t, st, 5*time.Second)
		require.NoError(t, err, "the request is routed")
	}
	require.NoError(t, st.Send(respHeaders("", false, ":status", "200", "content-type", "text/event-stream")))
	_, err := recvWithin(t, st, 5*time.Second)
	require.NoError(t, err, "the response headers are answered")
	require.NoError(t, st.Send(respBody("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", false)))
	_, err = recvWithin(t, st, 5*time.Second)
	require.Equal(t, codes.Internal, status.Code(err), "got %v", err)
	require.Contains(t, status.Convert(err).Message(), "exited its goroutine")
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond, "the request completed once")
}
