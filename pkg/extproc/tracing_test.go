package extproc_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
	"github.com/switchyard-ai/switchyard/pkg/tracing/tracingtest"
)

// traceConfig has a plugin at every extension point scheduling traces: a
// data producer (which also has the PreRequest, ResponseReceived and
// ResponseComplete hooks), an admitter, a filter, two scorers and a
// picker.
const traceConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: inflight-load-producer
- type: kv-saturation-admitter
- type: by-label
  parameters:
    label: app
    validValues: ["vllm"]
    allowsNoLabel: true
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: by-label
  - pluginRef: queue-scorer
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: max-score-picker
`

// newProvider builds a provider that exports to endpoint, shut down when
// the test ends.
func newProvider(t testing.TB, endpoint string, sampler string, ratio float64, mutate ...func(*tracing.Config)) *tracing.Provider {
	t.Helper()
	cfg := tracing.Config{Enabled: true, Exporters: []string{tracing.ExporterOTLP}, Endpoint: endpoint,
		Sampler: sampler, SamplerArg: ratio, ServiceVersion: "test"}
	for _, f := range mutate {
		f(&cfg)
	}
	p, err := tracing.New(context.Background(), cfg, logr.Discard())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

func withTracer(p *tracing.Provider) func(*extproc.Options) {
	return func(o *extproc.Options) { o.Tracer = p.Tracer() }
}

// traceparent parses a W3C traceparent header.
func traceparent(t *testing.T, v string) (traceID, spanID, flags string) {
	t.Helper()
	parts := strings.Split(v, "-")
	require.Len(t, parts, 4, "traceparent %q", v)
	require.Equal(t, "00", parts[0])
	return parts[1], parts[2], parts[3]
}

// One request through a real ext_proc stream, with a site stage, is one
// trace in a real OTLP collector: the stream's span is the child of the
// gateway's traceparent and the parent of the request, orchestration and
// response spans; the orchestration holds the site stage and the
// scheduling, which holds a span per plugin run and per profile, which
// holds the filter, scorer and picker spans. The upstream request carries
// the stream span's context in traceparent.
func TestTracingOneRequest(t *testing.T) {
	coll := tracingtest.Start(t)
	// Ratio 0: only the gateway's sampled flag makes this request traced,
	// so the test also proves that the incoming context is the parent.
	prov := newProvider(t, coll.Endpoint(), "parentbased_traceidratio", 0)
	holder := &sitestate.Holder{}
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{site("here", true, "")}, AnyModel: true})
	h := start(t, traceConfig, threePods(), withSites(t, holder), withTracer(prov))

	const inTrace, inSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	got := h.exchange(t, []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/completions", "traceparent", "00-"+inTrace+"-"+inSpan+"-01", "tracestate", "vendor=v1"),
		body(siteBody, true),
		respHeaders("", false, ":status", "200"),
		respBody(`{"usage":{"prompt_tokens":3,"completion_tokens":2}}`, true),
	}, 4)
	hs := setHeaders(got[0])
	dest := hs[extproc.DestinationHeader]
	require.True(t, strings.HasPrefix(dest, "127.10.0."), dest)
	upTrace, upSpan, flags := traceparent(t, hs["traceparent"])
	require.Equal(t, inTrace, upTrace, "the upstream continues the gateway's trace")
	require.Equal(t, "01", flags)
	require.NotEqual(t, inSpan, upSpan)
	require.Equal(t, "vendor=v1", hs["tracestate"])

	require.NoError(t, prov.ForceFlush(t.Context()))
	var spans []tracingtest.Span
	require.Eventually(t, func() bool {
		spans = coll.Spans()
		for _, s := range spans {
			if s.Name == tracing.SpanRequest {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	tree := tracingtest.NewTree(spans)
	for _, s := range spans {
		require.Equal(t, inTrace, s.TraceID, "span %s", s.Name)
		require.Equal(t, tracing.DefaultServiceName, s.Resource["service.name"])
		require.Equal(t, tracing.ScopeName, s.Scope)
	}
	one := func(name string) tracingtest.Span {
		t.Helper()
		ss := tree.Named(name)
		require.Len(t, ss, 1, "spans named %q among %v", name, names(spans))
		return ss[0]
	}
	childOf := func(name string, parent tracingtest.Span) tracingtest.Span {
		t.Helper()
		s := one(name)
		require.Equal(t, parent.SpanID, s.ParentID, "%s is a child of %s", name, parent.Name)
		require.False(t, s.Start.Before(parent.Start), "%s starts within %s", name, parent.Name)
		require.False(t, s.End.After(parent.End), "%s ends within %s", name, parent.Name)
		return s
	}

	root := one(tracing.SpanRequest)
	require.Equal(t, inSpan, root.ParentID, "the stream's span is the child of the gateway's")
	require.Equal(t, "SPAN_KIND_SERVER", root.Kind)
	require.Equal(t, root.SpanID, upSpan, "the upstream request is the child of the stream's span")
	require.Equal(t, "m", root.Attributes[tracing.AttrModel])
	require.Equal(t, dest, root.Attributes[tracing.AttrEndpoint])
	require.Equal(t, "200", root.Attributes[tracing.AttrStatusCode])
	require.Equal(t, "req-1", root.Attributes[tracing.AttrRequestID])
	require.Equal(t, "2", root.Attributes[tracing.AttrOutputTokens])

	childOf(tracing.SpanRequestHeaders, root)
	childOf(tracing.SpanRequestBody, root)
	orch := childOf(tracing.SpanRequestOrchestration, root)
	require.Equal(t, dest, orch.Attributes[tracing.AttrEndpoint])
	require.Equal(t, "here", orch.Attributes[tracing.AttrSite])
	require.Equal(t, "0", orch.Attributes[tracing.AttrPriority], "request_prio is on the orchestration span, as in GIE")
	respHdrs := childOf(tracing.SpanResponseHeaders, root)
	childOf(tracing.SpanResponseBody, root)
	respDone := childOf(tracing.SpanResponseComplete, root)
	// The response hooks run in their response steps (PreRequest below,
	// in the scheduling).
	childOf("ResponseReceived inflight-load-producer", respHdrs)
	childOf("ResponseComplete inflight-load-producer", respDone)
	require.Empty(t, tree.Named(tracing.SpanFlowControl), "no flow control span without flow control")

	siteSpan := childOf(tracing.SpanSiteStage, orch)
	require.Equal(t, "here", siteSpan.Attributes[tracing.AttrSite])
	for _, k := range []string{tracing.AttrSiteTier, tracing.AttrSitePath, tracing.AttrSiteReason} {
		require.Contains(t, siteSpan.Attributes, k)
	}
	require.NotEmpty(t, siteSpan.Attributes[tracing.AttrSiteReason])

	sched := childOf(tracing.SpanSchedule, orch)
	require.Equal(t, dest, sched.Attributes[tracing.AttrEndpoint])
	require.Equal(t, "3", sched.Attributes[tracing.AttrCandidates])
	producer := childOf("PrepareData inflight-load-producer", sched)
	require.Equal(t, "inflight-load-producer", producer.Attributes[tracing.AttrPluginType])
	require.Equal(t, "PrepareData", producer.Attributes[tracing.AttrPoint])
	childOf("Admission kv-saturation-admitter", sched)
	// PreRequest runs once the endpoint is picked, at the end of Process.
	pre := childOf("PreRequest inflight-load-producer", sched)
	require.Equal(t, "PreRequest", pre.Attributes[tracing.AttrPoint])
	prof := childOf(tracing.SpanProfile, sched)
	require.Equal(t, "default", prof.Attributes[tracing.AttrProfile])
	require.Equal(t, dest, prof.Attributes[tracing.AttrEndpoint])
	filter := childOf("Filter by-label", prof)
	require.Equal(t, "3", filter.Attributes[tracing.AttrEndpointsOut])
	childOf("Scorer queue-scorer", prof)
	childOf("Scorer kv-cache-utilization-scorer", prof)
	childOf("Picker max-score-picker", prof)
	// The profile handler's runs are plugin spans of the scheduling too.
	var handler int
	for _, s := range tree.Children[sched.SpanID] {
		if s.Attributes[tracing.AttrPoint] == "ProfilePicker" || s.Attributes[tracing.AttrPoint] == "ProcessProfilesResults" {
			handler++
		}
	}
	require.GreaterOrEqual(t, handler, 2, "profile handler spans: %v", names(spans))
	// Every span of the trace hangs off the stream's span.
	for _, s := range spans {
		if s.SpanID == root.SpanID {
			continue
		}
		p, ok := tree.Parent(s)
		for ok && p.SpanID != root.SpanID {
			p, ok = tree.Parent(p)
		}
		require.True(t, ok, "%s is below the stream's span", s.Name)
	}
}

// waitSpan waits for the collector to hold a span named name and returns
// every span it holds then.
func waitSpan(t *testing.T, coll *tracingtest.Collector, prov *tracing.Provider, name string) []tracingtest.Span {
	t.Helper()
	require.NoError(t, prov.ForceFlush(t.Context()))
	var spans []tracingtest.Span
	require.Eventually(t, func() bool {
		spans = coll.Spans()
		for _, s := range spans {
			if s.Name == name {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	return spans
}

// With flow control on, the wait in it is a span of the orchestration,
// with its outcome, before the scheduling.
func TestTracingFlowControl(t *testing.T) {
	coll := tracingtest.Start(t)
	prov := newProvider(t, coll.Endpoint(), "always_on", 0)
	c, err := flowcontrol.New(flowcontrol.Config{}, &slotPool{open: true, endpoints: 3})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return c.Stats().Running }, 5*time.Second, time.Millisecond)
	h := start(t, traceConfig, threePods(), withTracer(prov))
	rt := *h.rt.Load()
	rt.Flow = &gate{c: c}
	h.setRuntime(&rt)

	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(siteBody, true),
		respHeaders("", true, ":status", "200")}, 3)
	require.NotEmpty(t, setHeaders(got[0])[extproc.DestinationHeader])
	tree := tracingtest.NewTree(waitSpan(t, coll, prov, tracing.SpanRequest))
	orch := tree.Named(tracing.SpanRequestOrchestration)
	require.Len(t, orch, 1)
	flow := tree.Named(tracing.SpanFlowControl)
	require.Len(t, flow, 1)
	require.Equal(t, orch[0].SpanID, flow[0].ParentID, "the flow control span is a child of the orchestration")
	require.Equal(t, "Dispatched", flow[0].Attributes[tracing.AttrFlowOutcome])
	sched := tree.Named(tracing.SpanSchedule)
	require.Len(t, sched, 1)
	require.False(t, sched[0].Start.Before(flow[0].End), "scheduling starts after the flow control wait")
}

// A client cannot make the export queue hold its request body: a 1 MiB
// model name reaches the collector cut to the attribute length limit, on
// every span that carries it.
func TestTracingAttributeLengthLimit(t *testing.T) {
	coll := tracingtest.Start(t)
	prov := newProvider(t, coll.Endpoint(), "parentbased_traceidratio", 0)
	h := start(t, traceConfig, threePods(), withTracer(prov))
	model := strings.Repeat("m", 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := h.client.Process(ctx)
	require.NoError(t, err)
	for _, m := range []*extprocv3.ProcessingRequest{
		// A client-sent sampled flag is honoured by default: it forces sampling.
		reqHeaders("/v1/completions", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		body(`{"model":"`+model+`","prompt":"hello"}`, true), respHeaders("", true, ":status", "200")} {
		require.NoError(t, stream.Send(m))
	}
	first, err := stream.Recv()
	require.NoError(t, err)
	require.NotEmpty(t, setHeaders(first)[extproc.DestinationHeader])
	require.NoError(t, stream.CloseSend())
	for err == nil { // the body, in chunks, and the response headers
		_, err = stream.Recv()
	}
	require.ErrorIs(t, err, io.EOF)
	tree := tracingtest.NewTree(waitSpan(t, coll, prov, tracing.SpanRequest))
	var carriers int
	for _, name := range []string{tracing.SpanRequest, tracing.SpanRequestOrchestration, tracing.SpanSchedule} {
		ss := tree.Named(name)
		require.Len(t, ss, 1, name)
		for _, k := range []string{tracing.AttrModel, tracing.AttrTargetModel} {
			v, ok := ss[0].Attributes[k]
			require.True(t, ok, "%s has %s", name, k)
			require.Equal(t, model[:tracing.DefaultAttributeValueLengthLimit], v, "%s's %s is truncated", name, k)
			carriers++
		}
	}
	require.Equal(t, 6, carriers)
}

// With IgnoreRemoteSampled, a client's traceparent with the sampled flag
// set does not force sampling: the ratio (0) decides, and the upstream
// still continues the client's trace ID, unsampled.
func TestTracingIgnoreRemoteSampled(t *testing.T) {
	coll := tracingtest.Start(t)
	prov := newProvider(t, coll.Endpoint(), "parentbased_traceidratio", 0, func(c *tracing.Config) { c.IgnoreRemoteSampled = true })
	h := start(t, traceConfig, threePods(), withTracer(prov))
	const inTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	got := h.exchange(t, []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/completions", "traceparent", "00-"+inTrace+"-00f067aa0ba902b7-01"),
		body(siteBody, true), respHeaders("", true, ":status", "200")}, 3)
	upTrace, _, flags := traceparent(t, setHeaders(got[0])["traceparent"])
	require.Equal(t, inTrace, upTrace)
	require.Equal(t, "00", flags, "the client's sampled flag is not followed")
	require.NoError(t, prov.ForceFlush(t.Context()))
	require.Empty(t, coll.Spans())
}

func names(spans []tracingtest.Span) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

// A refused request's spans say why; a request the sampler does not pick
// exports nothing but still hands its trace context upstream, unsampled.
func TestTracingRefusalAndUnsampled(t *testing.T) {
	coll := tracingtest.Start(t)
	prov := newProvider(t, coll.Endpoint(), "parentbased_traceidratio", 0)
	h := start(t, traceConfig, nil, withTracer(prov))

	// Sampled by the gateway, refused: no endpoints.
	const inTrace = "0af7651916cd43dd8448eb211c80319c"
	got := h.exchange(t, []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/completions", "traceparent", "00-"+inTrace+"-b7ad6b7169203331-01"), body(siteBody, true)}, 1)
	require.NotNil(t, got[0].GetImmediateResponse())
	require.NoError(t, prov.ForceFlush(t.Context()))
	var root tracingtest.Span
	require.Eventually(t, func() bool {
		for _, s := range coll.Spans() {
			if s.Name == tracing.SpanRequest {
				root = s
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, inTrace, root.TraceID)
	require.Equal(t, extproc.ReasonNoEndpoints, root.Attributes[tracing.AttrRefusalReason])
	require.Equal(t, "503", root.Attributes[tracing.AttrStatusCode])
	orch := tracingtest.NewTree(coll.Spans()).Named(tracing.SpanRequestOrchestration)
	require.Len(t, orch, 1)
	require.Equal(t, extproc.ReasonNoEndpoints, orch[0].Attributes[tracing.AttrRefusalReason])

	// Not sampled (no incoming context, ratio 0): the upstream gets a
	// traceparent with the sampled flag off, and nothing is exported.
	before := len(coll.Spans())
	h.view.all, h.view.ready = threePods(), threePods()
	got = h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(siteBody, true),
		respHeaders("", true, ":status", "200")}, 3)
	_, _, flags := traceparent(t, setHeaders(got[0])["traceparent"])
	require.Equal(t, "00", flags)
	require.NoError(t, prov.ForceFlush(t.Context()))
	require.Len(t, coll.Spans(), before, "an unsampled request exports no span")
}

// Without a Tracer nothing is traced and no trace context is added: the
// gateway's traceparent reaches the upstream unchanged.
func TestTracingOff(t *testing.T) {
	h := start(t, traceConfig, threePods())
	got := h.exchange(t, []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/completions", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		body(siteBody, true), respHeaders("", true, ":status", "200")}, 3)
	require.NotContains(t, setHeaders(got[0]), "traceparent")
}

// An unreachable collector costs the request path nothing visible:
// spans go to a bounded queue that the exporter drains on its own
// goroutine, so every request is answered at once while exports fail,
// and Shutdown gives up within its deadline.
func TestTracingUnreachableCollector(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + lis.Addr().String()
	require.NoError(t, lis.Close()) // nothing listens there any more
	prov, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Exporters: []string{tracing.ExporterOTLP},
		Endpoint: dead, Sampler: "always_on", MaxQueueSize: 16, ExportTimeout: 2 * time.Second}, logr.Discard())
	require.NoError(t, err)
	shutdownDone := false
	t.Cleanup(func() {
		if !shutdownDone {
			_ = prov.Shutdown(context.Background())
		}
	})
	h := start(t, traceConfig, threePods(), withTracer(prov))
	ctx := context.Background()
	var slowest time.Duration
	for i := range 300 { // far more spans than the queue holds
		t0 := time.Now()
		require.NoError(t, oneRequest(ctx, h.client, benchMessages(i)))
		slowest = max(slowest, time.Since(t0))
	}
	// The exporter's timeout is 10 s and it retries for a minute: a
	// request that waited for it would take seconds.
	require.Less(t, slowest, 2*time.Second, "the slowest request")
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	t0 := time.Now()
	_ = prov.Shutdown(sctx) // gives up: the collector is unreachable
	shutdownDone = true
	require.Less(t, time.Since(t0), 5*time.Second, "Shutdown returns by its deadline")
	// The export under way ends by its own timeout (2 s): wait for the
	// exporter's and batch processor's goroutines to be gone (goleak
	// checks again when the package's tests end).
	require.Eventually(t, func() bool { return !tracingtest.ExporterRunning() }, 30*time.Second, 50*time.Millisecond,
		"the OTLP export ends by its timeout after Shutdown gave up")
	fmt.Fprintln(testWriter{t}, "slowest request with an unreachable collector:", slowest)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
