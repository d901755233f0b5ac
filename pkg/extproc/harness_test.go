package extproc_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// view is a fixed endpoint view.
type view struct{ all, ready []*scheduling.Endpoint }

func (v *view) All() []*scheduling.Endpoint      { return v.all }
func (v *view) Routable() []*scheduling.Endpoint { return v.ready }

// counter is per-endpoint accounting that tests can read.
type counter struct {
	inFlight, tokens, started, finished, ok atomic.Int64
	ttft                                    atomic.Int64
}

func (c *counter) Start(tokens int64) {
	c.inFlight.Add(1)
	c.tokens.Add(tokens)
	c.started.Add(1)
}
func (c *counter) FirstToken(d time.Duration) { c.ttft.Store(int64(d)) }
func (c *counter) Finish(tokens int64, _ time.Duration, ok bool) {
	c.inFlight.Add(-1)
	c.tokens.Add(-tokens)
	c.finished.Add(1)
	if ok {
		c.ok.Add(1)
	}
}

type counters struct {
	mu sync.Mutex
	m  map[string]*counter
}

func (cs *counters) get(hostPort string) *counter {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = map[string]*counter{}
	}
	c := cs.m[hostPort]
	if c == nil {
		c = &counter{}
		cs.m[hostPort] = c
	}
	return c
}

// totalInFlight sums requests and tokens still counted anywhere.
func (cs *counters) totalInFlight() (reqs, tokens int64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.m {
		reqs += c.inFlight.Load()
		tokens += c.tokens.Load()
	}
	return reqs, tokens
}

// allZero reports whether every endpoint, each on its own, has nothing in
// flight and every start was finished (a sum could hide +1 here and -1
// there).
func (cs *counters) allZero() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.m {
		if c.inFlight.Load() != 0 || c.tokens.Load() != 0 || c.started.Load() != c.finished.Load() {
			return false
		}
	}
	return true
}

// endpoint builds a ready endpoint at 127.10.0.<n>:8000.
func endpoint(name, ip string, port int, m scheduling.Metrics) *scheduling.Endpoint {
	m.UpdateTime = time.Now()
	return scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: name, Address: ip, Port: port}, m, nil)
}

const queueConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`

type harness struct {
	client   extprocv3.ExternalProcessorClient
	counters *counters
	view     *view
	rt       atomic.Pointer[extproc.Runtime]
}

// setRuntime swaps the configuration, as a reload does.
func (h *harness) setRuntime(rt *extproc.Runtime) { h.rt.Store(rt) }

// start serves an extproc.Server on a loopback gRPC listener.
func start(t testing.TB, cfgYAML string, eps []*scheduling.Endpoint, tweak ...func(*extproc.Options)) *harness {
	t.Helper()
	return startGRPC(t, cfgYAML, eps, nil, tweak...)
}

// startGRPC is start with options for the gRPC server (interceptors).
func startGRPC(t testing.TB, cfgYAML string, eps []*scheduling.Endpoint, grpcOpts []grpc.ServerOption, tweak ...func(*extproc.Options)) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	loaded, err := config.Load([]byte(cfgYAML), config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
	require.NoError(t, err)
	h := &harness{counters: &counters{}, view: &view{all: eps, ready: eps}}
	h.rt.Store(&extproc.Runtime{Scheduler: loaded.Scheduler, Format: loaded.Parser.Format()})
	opts := extproc.Options{
		Runtime:   h.rt.Load,
		Endpoints: func() extproc.EndpointView { return h.view },
		Stats:     func(e *scheduling.Endpoint) extproc.Stats { return h.counters.get(e.HostPort()) },
	}
	for _, f := range tweak {
		f(&opts)
	}
	srv, err := extproc.New(opts)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(grpcOpts...)
	extprocv3.RegisterExternalProcessorServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	h.client = extprocv3.NewExternalProcessorClient(conn)
	return h
}

// exchange sends msgs on one stream, then reads until the server ends the
// stream or until want responses arrived and the stream stays quiet.
func (h *harness) exchange(t testing.TB, msgs []*extprocv3.ProcessingRequest, want int) []*extprocv3.ProcessingResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := h.client.Process(ctx)
	require.NoError(t, err)
	for _, m := range msgs {
		require.NoError(t, stream.Send(m))
	}
	var out []*extprocv3.ProcessingResponse
	for len(out) < want {
		r, err := stream.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		out = append(out, r)
	}
	require.NoError(t, stream.CloseSend())
	// Nothing more may arrive: the server ends the stream on our EOF.
	_, err = stream.Recv()
	require.ErrorIs(t, err, io.EOF)
	return out
}

// Request builders, shaped as Envoy sends them.

func hdrs(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos},
	}}
}

func reqHeaders(path string, kv ...string) *extprocv3.ProcessingRequest {
	return hdrs(false, append([]string{":method", "POST", ":path", path, ":authority", "gw", "x-request-id", "req-1", "content-type", "application/json"}, kv...)...)
}

func body(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos},
	}}
}

func reqTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
}

func respHeaders(served string, eos bool, kv ...string) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos},
	}}
	if served != "" {
		m.MetadataContext = lbMetadata(extproc.LBNamespace, extproc.ServedKey, structpb.NewStringValue(served))
	}
	return m
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos},
	}}
}

func lbMetadata(ns, key string, v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		ns: {Fields: map[string]*structpb.Value{key: v}},
	}}
}

func withSubset(m *extprocv3.ProcessingRequest, v *structpb.Value) *extprocv3.ProcessingRequest {
	m.MetadataContext = lbMetadata(extproc.SubsetNamespace, extproc.SubsetKey, v)
	return m
}

func list(items ...string) *structpb.Value {
	vals := make([]*structpb.Value, len(items))
	for i, s := range items {
		vals[i] = structpb.NewStringValue(s)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vals})
}

// Expected responses.

func hv(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

func routed(dest string, set ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{
				ClearRouteCache: true,
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: append([]*corev3.HeaderValueOption{hv("x-gateway-destination-endpoint", dest)}, set...)},
			},
		}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"envoy.lb": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"x-gateway-destination-endpoint": structpb.NewStringValue(dest),
			}}),
		}},
	}
}

// removing adds header removals to a request-headers response.
func removing(r *extprocv3.ProcessingResponse, names ...string) *extprocv3.ProcessingResponse {
	hm := r.GetRequestHeaders().GetResponse().GetHeaderMutation()
	hm.RemoveHeaders = append(hm.RemoveHeaders, names...)
	return r
}

func streamed(b string, eos bool) *extprocv3.CommonResponse {
	var data []byte
	if b != "" {
		data = []byte(b)
	}
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
		StreamedResponse: &extprocv3.StreamedBodyResponse{Body: data, EndOfStream: eos},
	}}}
}

func reqBodyResp(b string, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: streamed(b, eos)},
	}}
}

func respBodyResp(b string, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: streamed(b, eos)},
	}}
}

func respHeadersResp(set ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}},
	}}
}
