package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// fakeNow is a settable clock for the gate's claim times.
type fakeNow struct{ ns atomic.Int64 }

func (c *fakeNow) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeNow) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newTestGate() (*flowGate, *fakeNow) {
	clk := &fakeNow{}
	clk.ns.Store(time.Unix(1_800_000_000, 0).UnixNano())
	g := &flowGate{now: clk.now}
	g.pool = &flowPool{gate: g}
	return g, clk
}

// TestFlowGateSlot: one release at a time; Started frees only its own
// claim; a claim older than pickTimeout no longer holds, and the late
// Started of the request it replaced frees nothing.
func TestFlowGateSlot(t *testing.T) {
	g, clk := newTestGate()
	g.c = mustController(t, g, flowcontrol.PoolFunc(func() (float64, int) { return 0, 1 }))
	a, b, c := &flowcontrol.Item{RequestID: "a"}, &flowcontrol.Item{RequestID: "b"}, &flowcontrol.Item{RequestID: "c"}

	require.False(t, g.pool.Held())
	require.True(t, g.pool.Hold(a), "a free slot is claimed")
	assert.True(t, g.pool.Held())
	assert.False(t, g.pool.Hold(b), "one release at a time")
	g.Started(b) // never held the slot: no effect
	assert.True(t, g.pool.Held(), "b's Started does not free a's claim")
	g.Started(a)
	assert.False(t, g.pool.Held(), "a started: the slot is free")
	g.Started(a) // twice: no effect
	require.True(t, g.pool.Hold(b))

	clk.advance(pickTimeout - time.Nanosecond)
	assert.True(t, g.pool.Held(), "younger than pickTimeout: held")
	assert.False(t, g.pool.Hold(c))
	clk.advance(time.Nanosecond)
	assert.False(t, g.pool.Held(), "b's claim is pickTimeout old: no longer held")
	require.True(t, g.pool.Hold(c), "an expired claim is replaced")
	g.Started(b) // b's late start
	assert.True(t, g.pool.Held(), "b's late Started does not free c's claim")
	g.Started(c)
	assert.False(t, g.pool.Held())
}

// mustController builds a controller with one band whose fairness policy
// is inner (nil: global strict), as flowConfig does: the gate's slot is
// claimed by the controller through pool's Holder.
func mustController(t testing.TB, _ *flowGate, pool flowcontrol.Pool, inner ...flowcontrol.FairnessPolicy) *flowcontrol.Controller {
	t.Helper()
	var in flowcontrol.FairnessPolicy = flowcontrol.GlobalStrict{}
	if len(inner) > 0 {
		in = inner[0]
	}
	band := flowcontrol.BandConfig{Fairness: in}
	c, err := flowcontrol.New(flowcontrol.Config{Bands: []flowcontrol.BandConfig{band}, DefaultBand: band, PollInterval: 5 * time.Millisecond}, pool)
	require.NoError(t, err)
	return c
}

// strayPick is a fairness policy: global strict that records its band's
// flow (record) or, once, returns the recorded flow of another band,
// which the controller's selection skips (the flow is not the band's).
type strayPick struct {
	record bool
	stray  *atomic.Pointer[flowcontrol.Flow]
	done   *atomic.Bool
}

func (p strayPick) Pick(b *flowcontrol.Band) *flowcontrol.Flow {
	f := flowcontrol.GlobalStrict{}.Pick(b)
	if p.record {
		if f != nil {
			p.stray.Store(f)
		}
		return f
	}
	if s := p.stray.Load(); s != nil && s.Head() != nil && p.done.CompareAndSwap(false, true) {
		return s
	}
	return f
}

// released waits for an Enqueue outcome.
func released(t *testing.T, out <-chan flowcontrol.Outcome, within time.Duration, what string) {
	t.Helper()
	select {
	case o := <-out:
		require.Equal(t, flowcontrol.Dispatched, o, what)
	case <-time.After(within):
		t.Fatalf("%s: not released within %v", what, within)
	}
}

// TestFlowGateSkippedPickHoldsNoSlot: a fairness policy returning a flow
// the controller skips (another band's) claims no release slot; the
// controller goes on to the next band and releases its head at once,
// which then holds the slot. (With the claim in the policy's wrapper the
// skipped flow's head held the slot unreleased for pickTimeout: every
// band and the fast path waited 1 s.)
func TestFlowGateSkippedPickHoldsNoSlot(t *testing.T) {
	g, _ := newTestGate()
	g.now = time.Now
	var stray atomic.Pointer[flowcontrol.Flow]
	var done atomic.Bool
	hi := flowcontrol.BandConfig{Priority: 1, Fairness: strayPick{stray: &stray, done: &done}}
	lo := flowcontrol.BandConfig{Priority: 0, Fairness: strayPick{record: true, stray: &stray, done: &done}}
	c, err := flowcontrol.New(flowcontrol.Config{Bands: []flowcontrol.BandConfig{hi, lo}, DefaultBand: lo, PollInterval: 5 * time.Millisecond}, gatePool{g})
	require.NoError(t, err)
	g.c = c
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.Run(ctx) }()
	defer wg.Wait()
	defer cancel()
	require.Eventually(t, func() bool { return c.Stats().Running }, 5*time.Second, time.Millisecond)

	enqueue := func(id string, prio int) (*flowcontrol.Item, chan flowcontrol.Outcome) {
		it := &flowcontrol.Item{RequestID: id, Flow: flowcontrol.FlowKey{ID: id[:2], Priority: prio}}
		out := make(chan flowcontrol.Outcome, 1)
		go func() { out <- c.Enqueue(ctx, it) }()
		return it, out
	}
	x := &flowcontrol.Item{RequestID: "x"}
	require.True(t, g.pool.Hold(x))
	l1, out1 := enqueue("lo1", 0)
	require.Eventually(t, func() bool { return c.Stats().Requests == 1 }, 5*time.Second, time.Millisecond)
	l2, out2 := enqueue("lo2", 0)
	require.Eventually(t, func() bool { return c.Stats().Requests == 2 }, 5*time.Second, time.Millisecond)
	g.Started(x)
	released(t, out1, 5*time.Second, "lo1")
	require.Equal(t, l1, g.slot.Load(), "lo1 holds the slot")
	require.NotNil(t, stray.Load(), "the low band's flow was recorded")

	h, outH := enqueue("hi1", 1)
	require.Eventually(t, func() bool { return c.Stats().Requests == 2 }, 5*time.Second, time.Millisecond)
	// lo1 starts: the high band's policy returns the low band's flow
	// (skipped); the low band releases lo2.
	g.Started(l1)
	released(t, out2, pickTimeout/3, "lo2 after the skipped pick")
	assert.True(t, done.Load(), "the stray pick happened")
	assert.Equal(t, l2, g.slot.Load(), "the released request holds the slot, not a skipped one")
	g.Started(l2)
	released(t, outH, 5*time.Second, "hi1")
	g.Started(h)
	assert.False(t, g.pool.Held())
}

// gatePool is a pool with room whose Holder is the gate's, as the
// server's flowPool.
type gatePool struct{ g *flowGate }

func (p gatePool) Saturation() (float64, int)     { return 0, 1 }
func (p gatePool) Held() bool                     { return p.g.pool.Held() }
func (p gatePool) Hold(it *flowcontrol.Item) bool { return p.g.pool.Hold(it) }

// interleave is a fairness policy that, on its first call, lets the fast
// path of Enqueue claim the release slot (Hold) after the dispatcher saw
// the pool not held and before its pick claims the slot: the interleaving
// that released two requests on one slot.
type interleave struct {
	g    *flowGate
	fast *flowcontrol.Item
	once sync.Once
	won  atomic.Bool
}

func (p *interleave) Pick(b *flowcontrol.Band) *flowcontrol.Flow {
	p.once.Do(func() { p.won.Store(p.g.pool.Hold(p.fast)) })
	return flowcontrol.GlobalStrict{}.Pick(b)
}

// TestFlowGateFastPathBeatsPick: a request released by the fast path
// between the dispatcher's Held() check and its pick keeps the slot: the
// dispatcher releases nothing until that request starts, then the queued
// one.
func TestFlowGateFastPathBeatsPick(t *testing.T) {
	g, _ := newTestGate()
	g.now = time.Now
	held := &flowcontrol.Item{RequestID: "held"}
	fast := &flowcontrol.Item{RequestID: "fast"}
	pol := &interleave{g: g, fast: fast}
	g.c = mustController(t, g, gatePool{g}, pol)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.c.Run(ctx) }()
	defer wg.Wait()
	defer cancel()
	require.Eventually(t, func() bool { return g.c.Stats().Running }, 5*time.Second, time.Millisecond)

	// The slot is taken, so the next request queues.
	require.True(t, g.pool.Hold(held))
	queued := &flowcontrol.Item{RequestID: "queued", Flow: flowcontrol.FlowKey{ID: "t"}}
	out := make(chan flowcontrol.Outcome, 1)
	go func() { out <- g.c.Enqueue(ctx, queued) }()
	require.Eventually(t, func() bool { return g.c.Stats().Requests == 1 }, 5*time.Second, time.Millisecond)

	// held starts: the dispatcher looks (not held), the fast path claims
	// the slot inside the pick, and the pick must yield.
	g.Started(held)
	require.Eventually(t, func() bool { return pol.won.Load() }, 5*time.Second, time.Millisecond, "the fast path claimed the free slot")
	select {
	case o := <-out:
		t.Fatalf("the queued request was released (%v) while the fast path's release was pending", o)
	case <-time.After(100 * time.Millisecond):
	}
	assert.Equal(t, uint64(1), g.c.Stats().Requests, "still queued")

	g.Started(fast)
	select {
	case o := <-out:
		assert.Equal(t, flowcontrol.Dispatched, o)
	case <-time.After(5 * time.Second):
		t.Fatal("the queued request was never released")
	}
	assert.True(t, g.pool.Held(), "the released request holds the slot until it starts")
	g.Started(queued)
	assert.False(t, g.pool.Held())
}

// TestFlowGateOneReleaseAtATime: under concurrent fast-path enqueues and
// dispatcher releases, no two requests are ever released and not started
// at the same time, and every request is released.
func TestFlowGateOneReleaseAtATime(t *testing.T) {
	g, _ := newTestGate()
	g.now = time.Now
	g.c = mustController(t, g, gatePool{g})
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Add(1)
	go func() { defer run.Done(); g.c.Run(ctx) }()
	defer run.Wait()
	defer cancel()
	require.Eventually(t, func() bool { return g.c.Stats().Running }, 5*time.Second, time.Millisecond)

	const workers, each = 8, 150
	var outstanding, worst, released, holdless atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				it := &flowcontrol.Item{RequestID: fmt.Sprintf("%d-%d", w, i), Flow: flowcontrol.FlowKey{ID: fmt.Sprint(w % 3)}}
				o := g.c.Enqueue(ctx, it)
				if o == flowcontrol.Dispatched {
					if g.slot.Load() != it {
						holdless.Add(1) // released without holding the slot
					}
					n := outstanding.Add(1)
					for {
						m := worst.Load()
						if n <= m || worst.CompareAndSwap(m, n) {
							break
						}
					}
					released.Add(1)
					// Keep the window open: another release now would
					// be a second one pending.
					runtime.Gosched()
					time.Sleep(20 * time.Microsecond)
					outstanding.Add(-1)
				}
				g.Started(it)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(workers*each), released.Load(), "every request released")
	assert.Equal(t, int64(1), worst.Load(), "at most one request released and not started at any time")
	assert.Zero(t, holdless.Load(), "every released request holds the slot until it starts")
	assert.False(t, g.pool.Held())
}

// counting is a data producer that counts its Produce calls.
type counting struct{ n atomic.Int64 }

func (p *counting) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "counting-producer", Name: "counting-producer"}
}
func (p *counting) Produces() []string { return []string{"test-counted"} }
func (p *counting) Consumes() []string { return nil }
func (p *counting) Produce(context.Context, *scheduling.Request, []*scheduling.Endpoint) {
	p.n.Add(1)
}

// TestFlowPoolSaturationRunsNoProducer: the dispatcher's look at the pool
// runs no data producer (no fake request, no Prepare) and gives the value
// the per-request path gives for the same in-flight state.
func TestFlowPoolSaturationRunsNoProducer(t *testing.T) {
	path := endpointsFile(t, 4)
	s, err := New(Config{EndpointsFile: path, ConfigText: flowTestConfig, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	defer s.closeListeners()
	defer s.closeConfig()

	prod := &counting{}
	reg := plugins.InTree().MustRegister(scheduling.Registration{
		Type: "counting-producer",
		Factory: scheduling.Typed(func() scheduling.NoParams { return scheduling.NoParams{} },
			func(string, scheduling.NoParams, scheduling.Handle) (*counting, error) { return prod, nil }),
	})
	text := strings.Replace(flowTestConfig, "plugins:\n", "plugins:\n- type: counting-producer\n", 1)
	text = strings.Replace(text, "{maxConcurrency: 1}", "{maxConcurrency: 2}", 1)
	loaded, err := config.Load([]byte(text), config.Options{Registry: reg, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	defer loaded.Close()
	old := s.gen.Load()
	s.gen.Store(&generation{loaded: loaded, runtime: old.runtime, flow: old.flow, flowCfg: old.flowCfg})
	s.commitFlow(s.gen.Load())

	cands := s.store.Snapshot().Routable()
	require.Len(t, cands, 4)
	// 1 + 2 + 0 + 3 requests in flight over 4 × 2.
	for i, n := range []int{1, 2, 0, 3} {
		st, ok := datastore.StatsKey.Get(cands[i])
		require.True(t, ok)
		for range n {
			st.Start(10)
		}
	}
	pool := old.flow.pool
	sat, eps := pool.Saturation()
	require.Equal(t, 4, eps)
	assert.InDelta(t, 6.0/8, sat, 1e-12)
	assert.Zero(t, prod.n.Load(), "the dispatcher's look ran a producer")

	req := &scheduling.Request{}
	loaded.Scheduler.Prepare(context.Background(), req, cands)
	require.Equal(t, int64(1), prod.n.Load(), "the per-request path runs the producers")
	assert.InDelta(t, loaded.SaturationDetector.Saturation(context.Background(), req, cands), sat, 1e-12,
		"the pool view and the per-request value agree")
	for range 10 {
		pool.Saturation()
	}
	assert.Equal(t, int64(1), prod.n.Load(), "still no producer run by the dispatcher")
}

// endpointsFile writes n unscraped endpoints on loopback.
func endpointsFile(tb testing.TB, n int) string {
	tb.Helper()
	var eps strings.Builder
	eps.WriteString("endpoints:\n")
	for i := range n {
		fmt.Fprintf(&eps, "- {name: e%d, address: 127.0.0.1, port: %d, scrape: false}\n", i, 10000+i)
	}
	path := filepath.Join(tb.TempDir(), "endpoints.yaml")
	require.NoError(tb, os.WriteFile(path, []byte(eps.String()), 0o600))
	return path
}

// plainDetector is a saturation detector without a pool view that records
// the requests it is asked with.
type plainDetector struct {
	nilReqs, calls atomic.Int64
}

func (d *plainDetector) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "plain-detector", Name: "plain-detector"}
}
func (d *plainDetector) Saturation(_ context.Context, req *scheduling.Request, _ []*scheduling.Endpoint) float64 {
	d.calls.Add(1)
	if req == nil {
		d.nilReqs.Add(1)
	}
	return 0.25
}

// TestFlowPoolSaturationFallbackRequest: a detector without a pool view is
// asked through its per-request contract: a non-nil request the
// producers prepared (never nil, which SaturationDetector does not
// allow).
func TestFlowPoolSaturationFallbackRequest(t *testing.T) {
	path := endpointsFile(t, 2)
	s, err := New(Config{EndpointsFile: path, ConfigText: flowTestConfig, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	defer s.closeListeners()
	defer s.closeConfig()

	prod, det := &counting{}, &plainDetector{}
	reg := plugins.InTree().MustRegister(scheduling.Registration{
		Type: "counting-producer",
		Factory: scheduling.Typed(func() scheduling.NoParams { return scheduling.NoParams{} },
			func(string, scheduling.NoParams, scheduling.Handle) (*counting, error) { return prod, nil }),
	}, scheduling.Registration{
		Type: "plain-detector",
		Factory: scheduling.Typed(func() scheduling.NoParams { return scheduling.NoParams{} },
			func(string, scheduling.NoParams, scheduling.Handle) (*plainDetector, error) { return det, nil }),
	})
	text := strings.Replace(flowTestConfig, "plugins:\n", "plugins:\n- type: counting-producer\n- type: plain-detector\n", 1)
	text = strings.Replace(text, "pluginRef: concurrency-detector", "pluginRef: plain-detector", 1)
	loaded, err := config.Load([]byte(text), config.Options{Registry: reg, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	defer loaded.Close()
	old := s.gen.Load()
	s.gen.Store(&generation{loaded: loaded, runtime: old.runtime, flow: old.flow, flowCfg: old.flowCfg})
	s.commitFlow(s.gen.Load())

	sat, eps := old.flow.pool.Saturation()
	assert.Equal(t, 2, eps)
	assert.InDelta(t, 0.25, sat, 1e-12)
	assert.Equal(t, int64(1), det.calls.Load())
	assert.Zero(t, det.nilReqs.Load(), "the detector was asked with a nil request")
	assert.Equal(t, int64(1), prod.n.Load(), "the fallback prepares the request")
}
