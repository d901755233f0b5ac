package extproc_test

import (
	"context"
	"io"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/metrics"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// slotPool is a pool whose room the test hands out: Saturation reports
// room while slots are left, and each report of room is one slot spent
// (the dispatcher releases one request per report). endpoints 0 means no
// endpoint at all.
type slotPool struct {
	mu        sync.Mutex
	slots     int
	endpoints int
	open      bool // always room (no saturation)
}

func (p *slotPool) Saturation() (float64, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open {
		return 0, p.endpoints
	}
	if p.slots > 0 {
		p.slots--
		return 0, p.endpoints
	}
	return 1, p.endpoints
}

func (p *slotPool) give(n int) { p.mu.Lock(); p.slots += n; p.mu.Unlock() }

// gate is a FlowController over a real flowcontrol.Controller.
type gate struct {
	c       *flowcontrol.Controller
	started atomic.Int64
}

func (g *gate) Enqueue(ctx context.Context, it *flowcontrol.Item) flowcontrol.Outcome {
	return g.c.Enqueue(ctx, it)
}
func (g *gate) Started(*flowcontrol.Item) { g.started.Add(1) }
func (g *gate) Notify()                   { g.c.Notify() }

// flowHarness starts the server with flow control over pool.
func flowHarness(t *testing.T, cfg flowcontrol.Config, pool *slotPool, objectives map[string]int, tweak ...func(*extproc.Options)) (*harness, *gate) {
	t.Helper()
	eps := []*scheduling.Endpoint{endpoint("a", "127.10.0.1", 8000, scheduling.Metrics{})}
	c, err := flowcontrol.New(cfg, pool)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return c.Stats().Running }, 5*time.Second, time.Millisecond)
	g := &gate{c: c}
	h := start(t, queueConfig, eps, func(o *extproc.Options) {
		o.Objective = func(name string) (int, bool) { p, ok := objectives[name]; return p, ok }
		for _, f := range tweak {
			f(o)
		}
	})
	rt := *h.rt.Load()
	rt.Flow = g
	h.setRuntime(&rt)
	return h, g
}

// openStream sends a complete request and returns the stream.
func queuedStream(t *testing.T, h *harness, ctx context.Context, kv ...string) extprocv3.ExternalProcessor_ProcessClient {
	t.Helper()
	stream, err := h.client.Process(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(reqHeaders("/v1/completions", kv...)))
	require.NoError(t, stream.Send(body(`{"model":"m","prompt":"hello"}`, true)))
	return stream
}

// recvAsync receives the first response of a stream in the background.
func recvAsync(stream extprocv3.ExternalProcessor_ProcessClient) <-chan *extprocv3.ProcessingResponse {
	ch := make(chan *extprocv3.ProcessingResponse, 1)
	go func() {
		r, err := stream.Recv()
		if err != nil {
			close(ch)
			return
		}
		ch <- r
	}()
	return ch
}

func queued(g *gate) uint64 { return g.c.Stats().Requests }

// TestQueueHoldsWhileSaturated: a request that arrives while the pool is
// saturated gets no answer (its stream is held) until the dispatcher
// releases it; then it is routed as usual.
func TestQueueHoldsWhileSaturated(t *testing.T) {
	pool := &slotPool{endpoints: 1}
	h, g := flowHarness(t, flowcontrol.Config{}, pool, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := queuedStream(t, h, ctx)
	got := recvAsync(stream)
	require.Eventually(t, func() bool { return queued(g) == 1 }, 5*time.Second, time.Millisecond)
	select {
	case r := <-got:
		t.Fatalf("answered while saturated: %v", r)
	case <-time.After(100 * time.Millisecond):
	}
	pool.give(1)
	g.Notify()
	r := <-got
	require.NotNil(t, r)
	assert.Equal(t, "127.10.0.1:8000", string(r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()[0].GetHeader().GetRawValue()))
	assert.Equal(t, int64(1), g.started.Load(), "Started once after scheduling")
	require.NoError(t, stream.CloseSend())
}

// immediate returns the status and reason of an ImmediateResponse.
func refusalOf(t *testing.T, r *extprocv3.ProcessingResponse) (int, string, string) {
	t.Helper()
	ir := r.GetImmediateResponse()
	require.NotNil(t, ir, "want an immediate response, got %v", r)
	reason, retry := "", ""
	for _, hv := range ir.GetHeaders().GetSetHeaders() {
		switch hv.GetHeader().GetKey() {
		case extproc.ReasonHeader:
			reason = string(hv.GetHeader().GetRawValue())
		case "retry-after":
			retry = string(hv.GetHeader().GetRawValue())
		}
	}
	return int(ir.GetStatus().GetCode()), reason, retry
}

// TestQueueRefusals: TTL expiry and a full queue are 429 with their
// reason and a Retry-After; a pool without endpoints is 503 no_endpoints.
func TestQueueRefusals(t *testing.T) {
	t.Run("ttl_expired", func(t *testing.T) {
		h, g := flowHarness(t, flowcontrol.Config{DefaultRequestTTL: 50 * time.Millisecond}, &slotPool{endpoints: 1}, nil)
		out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":"m","prompt":"hi"}`, true)}, 1)
		require.Len(t, out, 1)
		status, reason, retry := refusalOf(t, out[0])
		assert.Equal(t, 429, status)
		assert.Equal(t, extproc.ReasonTTLExpired, reason)
		assert.Equal(t, "1", retry)
		assert.Equal(t, int64(1), g.started.Load())
	})
	t.Run("queue_full", func(t *testing.T) {
		h, g := flowHarness(t, flowcontrol.Config{MaxRequests: 1}, &slotPool{endpoints: 1}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		first := queuedStream(t, h, ctx)
		require.Eventually(t, func() bool { return queued(g) == 1 }, 5*time.Second, time.Millisecond)
		out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":"m","prompt":"hi"}`, true)}, 1)
		status, reason, _ := refusalOf(t, out[0])
		assert.Equal(t, 429, status)
		assert.Equal(t, extproc.ReasonQueueFull, reason)
		_ = first.CloseSend()
	})
	t.Run("no_endpoints", func(t *testing.T) {
		h, _ := flowHarness(t, flowcontrol.Config{NoEndpointRequestTTL: 30 * time.Millisecond}, &slotPool{endpoints: 0}, nil)
		out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":"m","prompt":"hi"}`, true)}, 1)
		status, reason, _ := refusalOf(t, out[0])
		assert.Equal(t, 503, status)
		assert.Equal(t, extproc.ReasonNoEndpoints, reason)
	})
	t.Run("sheddable while saturated", func(t *testing.T) {
		h, _ := flowHarness(t, flowcontrol.Config{}, &slotPool{endpoints: 1}, map[string]int{"batch": -1})
		out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-gateway-inference-objective", "batch"), body(`{"model":"m","prompt":"hi"}`, true)}, 1)
		status, reason, _ := refusalOf(t, out[0])
		assert.Equal(t, 429, status)
		assert.Equal(t, extproc.ReasonShedSaturation, reason)
	})
}

// TestQueueClientDisconnect: a client that goes away while queued leaves
// the queue at once and is never dispatched: room that appears later
// dispatches nothing, and no endpoint counts a request.
func TestQueueClientDisconnect(t *testing.T) {
	pool := &slotPool{endpoints: 1}
	h, g := flowHarness(t, flowcontrol.Config{}, pool, nil)
	ctx, cancel := context.WithCancel(context.Background())
	stream := queuedStream(t, h, ctx)
	require.Eventually(t, func() bool { return queued(g) == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.Eventually(t, func() bool { return queued(g) == 0 }, 5*time.Second, time.Millisecond, "left the queue at once")
	pool.give(5)
	g.Notify()
	time.Sleep(50 * time.Millisecond)
	st := g.c.Stats()
	assert.Equal(t, uint64(1), st.Outcomes[flowcontrol.Cancelled])
	assert.Equal(t, uint64(0), st.Outcomes[flowcontrol.Dispatched])
	reqs, _ := h.counters.totalInFlight()
	assert.Zero(t, reqs)
	assert.Zero(t, h.counters.get("127.10.0.1:8000").started.Load(), "never forwarded")
	_, err := stream.Recv()
	assert.Error(t, err)
	assert.Eventually(t, func() bool { return g.started.Load() == 1 }, 5*time.Second, time.Millisecond)
}

// TestQueuePriorityOrder: requests of a higher priority (from their
// InferenceObjective) are released before lower ones that waited longer;
// within a priority, the fairness id (or the model) keys the flow.
func TestQueuePriorityOrder(t *testing.T) {
	pool := &slotPool{endpoints: 1}
	h, g := flowHarness(t, flowcontrol.Config{}, pool, map[string]int{"critical": 10})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	low := queuedStream(t, h, ctx, "x-gateway-inference-fairness-id", "tenant-a")
	lowGot := recvAsync(low)
	require.Eventually(t, func() bool { return queued(g) == 1 }, 5*time.Second, time.Millisecond)
	high := queuedStream(t, h, ctx, "x-gateway-inference-objective", "critical")
	highGot := recvAsync(high)
	require.Eventually(t, func() bool { return queued(g) == 2 }, 5*time.Second, time.Millisecond)
	bands := g.c.Stats().Bands
	require.Len(t, bands, 2)
	assert.Equal(t, 10, bands[0].Priority)

	pool.give(1)
	g.Notify()
	select {
	case r := <-highGot:
		require.NotNil(t, r.GetRequestHeaders(), "the high-priority request is routed first")
	case <-lowGot:
		t.Fatal("the low-priority request was released first")
	case <-time.After(5 * time.Second):
		t.Fatal("nothing released")
	}
	select {
	case <-lowGot:
		t.Fatal("one slot released two requests")
	case <-time.After(50 * time.Millisecond):
	}
	pool.give(1)
	g.Notify()
	r := <-lowGot
	require.NotNil(t, r.GetRequestHeaders())
	_ = low.CloseSend()
	_ = high.CloseSend()
}

// TestQueueReleasesBodyBudget: a queued request's body no longer counts
// against the buffer budget of bodies still arriving (flow control's byte
// limits bound it), so uploads keep being buffered while requests wait.
func TestQueueReleasesBodyBudget(t *testing.T) {
	pool := &slotPool{endpoints: 1}
	eps := []*scheduling.Endpoint{endpoint("a", "127.10.0.1", 8000, scheduling.Metrics{})}
	c, err := flowcontrol.New(flowcontrol.Config{}, pool)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	require.Eventually(t, func() bool { return c.Stats().Running }, 5*time.Second, time.Millisecond)
	g := &gate{c: c}
	h := start(t, queueConfig, eps, func(o *extproc.Options) {
		o.MaxRequestBodyBytes = 1 << 10
		o.MaxBufferedBytes = 2 << 10
	})
	rt := *h.rt.Load()
	rt.Flow = g
	h.setRuntime(&rt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each body arrives in two chunks: the first is buffered (budget), the
	// second completes it. Four held requests would need twice the budget.
	var streams []extprocv3.ExternalProcessor_ProcessClient
	for i := range 4 {
		s, err := h.client.Process(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Send(reqHeaders("/v1/completions")))
		require.NoError(t, s.Send(body(`{"model":"m","prompt":"`+strings.Repeat("x", 700), false)))
		require.NoError(t, s.Send(body(`"}`, true)))
		streams = append(streams, s)
		require.Eventually(t, func() bool { return queued(g) == uint64(i+1) }, 5*time.Second, time.Millisecond, "request %d queued, not refused", i)
	}
	// What is counted is what a queued request holds: its body's
	// capacity (one append may have grown it up to twice its length), its
	// headers and a per-request overhead. The prompt, one unescaped
	// string, is a sub-slice of the body and is not counted again
	// (TestHeldBytesCountsCopiesOnce checks each case exactly).
	bodyLen := len(`{"model":"m","prompt":"`) + 700 + 2
	hdr := 0
	for _, kv := range [][2]string{{":method", "POST"}, {":path", "/v1/completions"}, {":authority", "gw"}, {"x-request-id", "req-1"}, {"content-type", "application/json"}} {
		hdr += len(kv[0]) + len(kv[1]) + 16
	}
	got := c.Stats().Bytes
	fixed := uint64(4 * (extproc.QueuedRequestOverhead + hdr))
	assert.GreaterOrEqual(t, got, fixed+uint64(4*bodyLen), "flow control counts the bodies")
	assert.Less(t, got, fixed+uint64(4*(2*bodyLen)), "a prompt that aliases the body is not counted twice")
	t.Logf("counted %d B for 4 requests of %d B bodies (%d B each beyond the body's length)", got, bodyLen, (got-fixed)/4-uint64(bodyLen))
	for _, s := range streams {
		_ = s.CloseSend()
	}
	cancel()
	for _, s := range streams {
		for {
			if _, err := s.Recv(); err != nil {
				assert.NotErrorIs(t, err, io.EOF)
				break
			}
		}
	}
}

// TestQueueObjectiveReload: a request takes its priority from its
// InferenceObjective when it arrives and keeps it while it waits. An
// objective made sheddable (priority -1) or deleted while its requests
// are queued does not move or shed them: they stay in their band and are
// released in its order; requests that arrive after the change get the
// new priority (a sheddable one is refused while saturated, one naming
// the deleted objective waits at priority 0).
func TestQueueObjectiveReload(t *testing.T) {
	var mu sync.Mutex
	objectives := map[string]int{"critical": 10, "batch": 5}
	pool := &slotPool{endpoints: 1}
	h, g := flowHarness(t, flowcontrol.Config{}, pool, nil, func(o *extproc.Options) {
		o.Objective = func(name string) (int, bool) {
			mu.Lock()
			defer mu.Unlock()
			p, ok := objectives[name]
			return p, ok
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	crit := queuedStream(t, h, ctx, "x-gateway-inference-objective", "critical")
	critGot := recvAsync(crit)
	batch := queuedStream(t, h, ctx, "x-gateway-inference-objective", "batch")
	batchGot := recvAsync(batch)
	require.Eventually(t, func() bool { return queued(g) == 2 }, 5*time.Second, time.Millisecond)

	// The reload: critical becomes sheddable, batch is deleted.
	mu.Lock()
	objectives = map[string]int{"critical": -1}
	mu.Unlock()
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-gateway-inference-objective", "critical"), body(`{"model":"m","prompt":"hi"}`, true)}, 1)
	_, reason, _ := refusalOf(t, out[0])
	assert.Equal(t, extproc.ReasonShedSaturation, reason, "a new request of the now sheddable objective is shed")
	late := queuedStream(t, h, ctx, "x-gateway-inference-objective", "batch")
	lateGot := recvAsync(late)
	require.Eventually(t, func() bool { return queued(g) == 3 }, 5*time.Second, time.Millisecond)
	// After requests arrived under the new objectives (one shed, one
	// queued), the two queued before the reload are still in their bands
	// and only the new one is in the default band.
	type band struct {
		priority int
		requests uint64
	}
	var got []band
	for _, b := range g.c.Stats().Bands {
		got = append(got, band{b.Priority, b.Requests})
	}
	assert.Equal(t, []band{{10, 1}, {5, 1}, {0, 1}}, got, "queued requests keep their bands; the deleted objective's new request waits at priority 0")

	for i, want := range []<-chan *extprocv3.ProcessingResponse{critGot, batchGot, lateGot} {
		pool.give(1)
		g.Notify()
		select {
		case r := <-want:
			require.NotNil(t, r.GetRequestHeaders(), "release %d routed", i)
		case <-time.After(5 * time.Second):
			t.Fatalf("release %d: not in band order (10, 5, 0)", i)
		}
	}
	_ = crit.CloseSend()
	_ = batch.CloseSend()
	_ = late.CloseSend()
}

// flowRecording records the FlowWaiting calls. They are made under the
// controller's lock (flowcontrol.QueueWatcher), so it must not call the
// controller.
type flowRecording struct {
	*metrics.Metrics
	mu    sync.Mutex
	calls []flowCall
}

type flowCall struct {
	delta int
	bytes int64
}

func (r *flowRecording) FlowWaiting(fid string, p int, model, target string, bytes int64, delta int) {
	r.mu.Lock()
	r.calls = append(r.calls, flowCall{delta, bytes})
	r.mu.Unlock()
	r.Metrics.FlowWaiting(fid, p, model, target, bytes, delta)
}

func (r *flowRecording) snapshot() []flowCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]flowCall(nil), r.calls...)
}

// TestQueueGaugesCountQueuedOnly: the queue gauges (GIE's queue_size and
// queue_bytes) are raised only once a request is in the queue, with the
// bytes the controller counts, under its lock, so they equal the
// controller's own count at every instant: a request refused as queue_full, or dispatched at once, never
// shows in them; a queued one leaves them when it is dispatched.
func TestQueueGaugesCountQueuedOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "pool")
	require.NoError(t, err)
	rec := &flowRecording{Metrics: m}
	pool := &slotPool{endpoints: 1}
	h, g := flowHarness(t, flowcontrol.Config{MaxRequests: 1}, pool, nil, func(o *extproc.Options) { o.Metrics = rec })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	first := queuedStream(t, h, ctx)
	require.Eventually(t, func() bool { return len(rec.snapshot()) == 1 }, 5*time.Second, time.Millisecond)
	c0 := rec.snapshot()[0]
	assert.Equal(t, 1, c0.delta)
	st := g.c.Stats()
	assert.Equal(t, uint64(1), st.Requests, "raised as the controller counted the request")
	assert.Equal(t, uint64(c0.bytes), st.Bytes, "the gauge's bytes are the controller's")

	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":"m","prompt":"hi"}`, true)}, 1)
	_, reason, _ := refusalOf(t, out[0])
	require.Equal(t, extproc.ReasonQueueFull, reason)
	assert.Len(t, rec.snapshot(), 1, "a refused request never raises the gauges")

	ch := recvAsync(first)
	pool.give(1)
	select {
	case r := <-ch:
		require.NotNil(t, r.GetRequestHeaders(), "dispatched and routed")
	case <-time.After(5 * time.Second):
		t.Fatal("not dispatched")
	}
	require.Eventually(t, func() bool { return len(rec.snapshot()) == 2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, flowCall{-1, c0.bytes}, rec.snapshot()[1])

	pool.mu.Lock()
	pool.open = true
	pool.mu.Unlock()
	third := queuedStream(t, h, ctx)
	r, err := third.Recv()
	require.NoError(t, err)
	require.NotNil(t, r.GetRequestHeaders(), "dispatched at once")
	assert.Len(t, rec.snapshot(), 2, "a request dispatched at once never shows in the gauges")
	var size float64
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range fams {
		if mf.GetName() == metrics.NameFlowQueueSize {
			for _, s := range mf.GetMetric() {
				size += s.GetGauge().GetValue()
			}
		}
	}
	assert.Zero(t, size)
	_ = first.CloseSend()
	_ = third.CloseSend()
}

// BenchmarkRequestPathFlowControl is BenchmarkRequestPath with flow
// control on and the pool never saturated: the cost of the hold step on
// its fast path (nothing queued, room), flow metrics included.
func BenchmarkRequestPathFlowControl(b *testing.B) {
	pool := &slotPool{endpoints: 100, open: true}
	c, err := flowcontrol.New(flowcontrol.Config{}, pool)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	for !c.Stats().Running {
		time.Sleep(time.Millisecond)
	}
	g := &gate{c: c}
	m, err := metrics.New(prometheus.NewRegistry(), "pool")
	if err != nil {
		b.Fatal(err)
	}
	h := start(b, string(configfiles.Default), benchPods(100), func(o *extproc.Options) { o.Metrics = m })
	rt := *h.rt.Load()
	rt.Flow = g
	h.setRuntime(&rt)
	benchLoop(b, h.client)
}

// TestQueuedRequestOverhead measures what a queued request costs the
// process besides its request data: the heap (stream state, parsed
// request, flow item, gRPC stream state) and goroutine stacks of N queued
// streams, after a forced GC, over the same process with none. The client
// ends of the streams live in this process too, so the figure is an upper
// estimate of the EPP's share; queuedRequestOverhead must lie between the
// EPP's plausible share (a quarter of it) and all of it.
func TestQueuedRequestOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("measures memory")
	}
	h, g := flowHarness(t, flowcontrol.Config{}, &slotPool{endpoints: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 200
	before := liveMemory()
	streams := make([]extprocv3.ExternalProcessor_ProcessClient, 0, n)
	for range n {
		streams = append(streams, queuedStream(t, h, ctx))
	}
	require.Eventually(t, func() bool { return queued(g) == n }, 10*time.Second, time.Millisecond)
	after := liveMemory()
	per := (after - before) / n
	data := int64(g.c.Stats().Bytes)/n - extproc.QueuedRequestOverhead
	t.Logf("%d queued streams: %d B each (heap+stacks, both ends of the stream), request data counted %d B each, overhead constant %d B",
		n, per, data, extproc.QueuedRequestOverhead)
	assert.GreaterOrEqual(t, int64(extproc.QueuedRequestOverhead), (per-data)/4, "the overhead constant is not far below the measured cost")
	assert.LessOrEqual(t, int64(extproc.QueuedRequestOverhead), per, "the overhead constant is not above the measured cost")
	cancel()
	for _, s := range streams {
		_, _ = s.Recv()
	}
	runtime.KeepAlive(streams)
}

// liveMemory is the live heap plus goroutine stacks after a GC.
func liveMemory() int64 {
	runtime.GC()
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	rtmetrics.Read(s)
	return int64(s[0].Value.Uint64() + s[1].Value.Uint64())
}
