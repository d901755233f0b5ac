package server

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// flowGate is a configuration's flow controller as the request path sees
// it (extproc.FlowController). It adds one rule to the controller's: while
// a request the dispatcher (or Enqueue's fast path) released has not been
// scheduled yet, the pool is held (flowcontrol.Holder): no room whatever
// the band ceilings, while the saturation it reports stays the real one.
// A released request's load reaches the saturation detector only once it
// is scheduled and forwarded (the in-flight count starts then), so without
// the rule one free slot would release every waiting request at once; with
// it, the dispatcher releases one request per slot the detector reports,
// highest band first.
//
// # The release slot
//
// Invariant: at most one released request is pending (released, not yet
// Started) at any time, and it is slot. A release claims the slot (claim)
// by checking it is free and taking it in one step under mu; both ways to
// release a request go through claim (flowcontrol.Holder.Hold): the fast
// path of Enqueue and the dispatcher, under the controller's lock, for the
// item it has chosen and removes (it releases nothing when the slot is
// taken), so a claim always belongs to a released request. slot and since
// change together, only under mu; both are also atomics, so Held reads
// since (the claim's time, 0 when free) without the lock, in O(1), and
// Started returns without the lock unless its own request holds the slot
// (a request's claim happens before its Started), which it then frees. A
// claim older than pickTimeout counts as free: the next claim replaces
// it, and the old request's Started is then a no-op.
//
// (Before, the fairness policy's wrapper claimed the slot when it picked
// a flow, before the controller decided to release its head; a pick the
// controller then skipped held the slot for an item never released, and
// every band and the fast path waited pickTimeout.)
//
// # Drain rate
//
// Releases are serial: one per scheduling round trip (release, the
// request path schedules it, Started frees the slot, Notify wakes the
// dispatcher), whatever the number of free slots the detector reports.
// With K free slots and a queue the gate releases K requests in K round
// trips, not at once (BenchmarkFlowGateDrain measures one round trip).
// That is the price of not over-releasing on a detector whose view lags
// the release.
type flowGate struct {
	c    *flowcontrol.Controller
	pool *flowPool
	// noEndpointWait: flowControl.noEndpointRequestTTL (or
	// defaultRequestTTL) is set, so requests wait for endpoints to appear
	// (llm-d's scale-from-zero); otherwise a pool without endpoints
	// refuses at once (503 no_endpoints).
	noEndpointWait atomic.Bool

	mu    sync.Mutex
	slot  atomic.Pointer[flowcontrol.Item] // the pending release (written under mu); nil when free
	since atomic.Int64                     // slot's claim time in Unix ns (written under mu); 0 when free
	now   func() time.Time                 // time.Now; tests set a fake

	started bool // Run started (flowRunner.mu)
}

var _ extproc.FlowController = (*flowGate)(nil)

func newFlowGate(s *Server) *flowGate {
	g := &flowGate{now: time.Now}
	g.pool = &flowPool{s: s, gate: g}
	return g
}

// Enqueue implements extproc.FlowController.
func (g *flowGate) Enqueue(ctx context.Context, it *flowcontrol.Item) flowcontrol.Outcome {
	if !g.noEndpointWait.Load() && len(g.pool.s.store.Snapshot().Routable()) == 0 {
		return flowcontrol.NoEndpoint
	}
	return g.c.Enqueue(ctx, it)
}

// Started implements extproc.FlowController: it frees the release slot if
// it holds it.
func (g *flowGate) Started(it *flowcontrol.Item) {
	if g.slot.Load() != it {
		return
	}
	g.mu.Lock()
	ok := g.slot.Load() == it
	if ok {
		g.slot.Store(nil)
		g.since.Store(0)
	}
	g.mu.Unlock()
	if ok {
		g.c.Notify()
	}
}

// pickTimeout bounds how long a released request may keep the pool
// "saturated" before it is scheduled: scheduling takes microseconds to
// milliseconds, so a pick older than this was not a dispatch (or its
// stream is stuck) and no longer holds the others back.
const pickTimeout = time.Second

// heldAt reports whether the slot holds a claim younger than pickTimeout
// at now (Unix ns). Lock-free.
func (g *flowGate) heldAt(now int64) bool {
	t := g.since.Load()
	return t != 0 && now-t < int64(pickTimeout)
}

// claim takes the release slot for it, unless another request holds it
// (a claim younger than pickTimeout).
func (g *flowGate) claim(it *flowcontrol.Item) bool {
	now := max(g.now().UnixNano(), 1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.slot.Load() != nil && g.heldAt(now) {
		return false
	}
	g.slot.Store(it)
	g.since.Store(now)
	return true
}

// Notify implements extproc.FlowController.
func (g *flowGate) Notify() { g.c.Notify() }

// flowPool is the dispatcher's view of the pool: the serving
// configuration's saturation detector over the routable endpoints, read
// from the published snapshot and generation (no lock, no I/O). A
// configuration without a detector is never saturated.
type flowPool struct {
	s    *Server
	gate *flowGate
}

// Saturation implements flowcontrol.Pool without a request: the detector's
// pool view (scheduling.PoolSaturationDetector) reads published state
// only; no data producer runs. A detector without a pool view is asked
// through its per-request contract: an empty request the configuration's
// data producers prepare first (this fallback path only).
func (p *flowPool) Saturation() (float64, int) {
	cands := p.s.store.Snapshot().Routable()
	if len(cands) == 0 {
		return 1, 0
	}
	l := p.s.gen.Load().loaded
	det := l.SaturationDetector
	if det == nil {
		return 0, len(cands)
	}
	if pd, ok := det.(scheduling.PoolSaturationDetector); ok {
		return pd.PoolSaturation(cands), len(cands)
	}
	ctx, req := context.Background(), &scheduling.Request{}
	if l.Scheduler != nil {
		l.Scheduler.Prepare(ctx, req, cands)
	}
	return det.Saturation(ctx, req, cands), len(cands)
}

// Held implements flowcontrol.Holder: a released request is not yet
// scheduled. O(1), lock-free.
func (p *flowPool) Held() bool {
	return p.gate.heldAt(p.gate.now().UnixNano())
}

// Hold implements flowcontrol.Holder: the fast path claims the release
// slot.
func (p *flowPool) Hold(it *flowcontrol.Item) bool {
	return p.gate.claim(it)
}

var _ flowcontrol.Holder = (*flowPool)(nil)

// flowConfig returns a configuration's flow-control settings, or nil
// without the flowControl gate. The bands' fairness policies are the
// configured ones: the release slot is claimed by the controller itself
// (flowcontrol.Holder.Hold) for the item it releases.
func flowConfig(l *config.Loaded) (*flowcontrol.Config, error) {
	if l.FlowControl == nil {
		return nil, nil
	}
	cfg := *l.FlowControl
	cfg.Bands = slices.Clone(l.FlowControl.Bands)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// prepareFlow gives a loaded configuration with the flowControl gate the
// server's flow controller: the existing one (Reconfigure runs when the
// configuration serves, commitFlow), or a new one for the first such
// configuration. The controller lives as long as the server, so a reload
// keeps the requests waiting (re-ordered by the new policies), and one
// that turns the gate off lets them drain.
func (s *Server) prepareFlow(gen *generation) error {
	g := s.flow.Load()
	if g == nil {
		g = newFlowGate(s)
	}
	cfg, err := flowConfig(gen.loaded)
	if err != nil || cfg == nil {
		return err
	}
	cfg.Observer = cycleObserver{s.metrics}
	if g.c == nil {
		if g.c, err = flowcontrol.New(*cfg, g.pool); err != nil {
			return err
		}
	}
	gen.flow, gen.flowCfg = g, cfg
	gen.runtime.Flow = g
	return nil
}

// bindInFlightLoad gives a detector that reads in-flight load without a
// request (scheduling.InFlightLoadUser, concurrency-detector) the
// configuration's producer of scheduling.InFlightLoadKey, for the
// dispatcher's pool view. With several such producers the one with the
// first name is used; with none the detector reads the endpoints' own
// accounting.
func bindInFlightLoad(l *config.Loaded) {
	u, ok := l.SaturationDetector.(scheduling.InFlightLoadUser)
	if !ok {
		return
	}
	var best string
	var load scheduling.EndpointInFlightLoad
	for name, p := range l.Plugins {
		dp, ok := p.(scheduling.DataProducer)
		if !ok || !slices.Contains(dp.Produces(), scheduling.InFlightLoadKey.Name()) {
			continue
		}
		if v, ok := p.(scheduling.EndpointInFlightLoad); ok && (load == nil || name < best) {
			best, load = name, v
		}
	}
	u.UseInFlightLoad(load)
}

// commitFlow applies the settings of the configuration that now serves:
// its detector gets its producer's request-free view (bindInFlightLoad),
// the first flow controller starts (once Run runs), a later configuration
// reconfigures it.
func (s *Server) commitFlow(gen *generation) {
	bindInFlightLoad(gen.loaded)
	if gen.flow == nil {
		return
	}
	if s.flow.CompareAndSwap(nil, gen.flow) {
		gen.flow.noEndpointWait.Store(gen.flowCfg.NoEndpointRequestTTL > 0)
		s.flows.start(gen.flow)
		return
	}
	if err := gen.flow.c.Reconfigure(*gen.flowCfg); err != nil {
		// Validated when loaded; not expected.
		s.log.Error(err, "Flow control kept its previous settings")
	}
	gen.flow.noEndpointWait.Store(gen.flowCfg.NoEndpointRequestTTL > 0)
}

// cycleObserver feeds
// inference_extension_flow_control_dispatch_cycle_duration_seconds.
type cycleObserver struct {
	m interface{ FlowDispatchCycle(time.Duration) }
}

func (o cycleObserver) DispatchCycle(d time.Duration, _ int) { o.m.FlowDispatchCycle(d) }

// flowRunner runs the server's flow controller.
type flowRunner struct {
	mu  sync.Mutex
	ctx context.Context // Server.Run's; nil before Run
	wg  sync.WaitGroup
}

// start runs g's dispatcher until the server's end (once).
func (r *flowRunner) start(g *flowGate) {
	if g == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || g.started {
		return
	}
	g.started = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		g.c.Run(r.ctx)
	}()
}

// run sets the server's context and starts the flow controller, if any.
func (r *flowRunner) run(ctx context.Context, g *flowGate) {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	r.start(g)
}

func (r *flowRunner) wait() { r.wg.Wait() }

// flowCollector exports the serving controller's state at scrape time:
// inference_extension_flow_control_pool_saturation{inference_pool} (GIE),
// switchyard_flow_control_queue_utilization{limit} (queued over the global
// request and byte limits: the queue's capacity in use) and
// switchyard_flow_control_outcomes_total{outcome} (every enqueue by
// outcome: dispatched and the refusal reasons).
type flowCollector struct {
	pool string
	gate func() *flowGate
	sat  *prometheus.Desc
	util *prometheus.Desc
	outc *prometheus.Desc
}

// Flow-control metric names exported by the server.
const (
	NameFlowPoolSaturation   = "inference_extension_flow_control_pool_saturation"
	NameFlowQueueUtilization = "switchyard_flow_control_queue_utilization"
	NameFlowOutcomes         = "switchyard_flow_control_outcomes_total"
)

func newFlowCollector(pool string, gate func() *flowGate) *flowCollector {
	return &flowCollector{
		pool: pool, gate: gate,
		sat:  prometheus.NewDesc(NameFlowPoolSaturation, "Saturation of the pool at the flow-control dispatcher's last look (1.0 = saturated: requests wait).", []string{"inference_pool"}, nil),
		util: prometheus.NewDesc(NameFlowQueueUtilization, "Queued requests (limit=requests) or bytes (limit=bytes) over flowControl.maxRequests or maxBytes; absent for a limit that is not set.", []string{"limit"}, nil),
		outc: prometheus.NewDesc(NameFlowOutcomes, "Requests that went through flow control, by outcome (dispatched, queue_full, saturated, ttl_expired, no_endpoints, cancelled, flow_control_stopped) since the configuration loaded.", []string{"outcome"}, nil),
	}
}

func (c *flowCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.sat; ch <- c.util; ch <- c.outc }

func (c *flowCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.gate()
	if g == nil {
		return
	}
	st := g.c.Stats()
	ch <- prometheus.MustNewConstMetric(c.sat, prometheus.GaugeValue, st.Saturation, c.pool)
	if st.MaxRequests > 0 {
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, float64(st.Requests)/float64(st.MaxRequests), "requests")
	}
	if st.MaxBytes > 0 {
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, float64(st.Bytes)/float64(st.MaxBytes), "bytes")
	}
	for _, o := range flowcontrol.Outcomes() {
		ch <- prometheus.MustNewConstMetric(c.outc, prometheus.CounterValue, float64(st.Outcomes[o]), o.String())
	}
}
