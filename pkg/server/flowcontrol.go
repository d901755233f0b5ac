package server

import (
	"context"
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
// a request the dispatcher released has not been scheduled yet, the pool
// counts as saturated. A released request's load reaches the saturation
// detector only once it is scheduled and forwarded (the in-flight count
// starts then), so without the rule one free slot would release every
// waiting request at once; with it, the dispatcher releases one request
// per slot the detector reports, highest band first.
type flowGate struct {
	c    *flowcontrol.Controller
	pool *flowPool
	// noEndpointWait: flowControl.noEndpointRequestTTL (or
	// defaultRequestTTL) is set, so requests wait for endpoints to appear
	// (llm-d's scale-from-zero); otherwise a pool without endpoints
	// refuses at once (503 no_endpoints).
	noEndpointWait bool
	pending        atomic.Int64
	mu             sync.Mutex
	picked         map[*flowcontrol.Item]time.Time // released, not yet Started: since when

	cancel context.CancelFunc // stops Run; nil until started
	done   chan struct{}      // closed when Run returned
}

var _ extproc.FlowController = (*flowGate)(nil)

// Enqueue implements extproc.FlowController.
func (g *flowGate) Enqueue(ctx context.Context, it *flowcontrol.Item) flowcontrol.Outcome {
	if !g.noEndpointWait && len(g.pool.s.store.Snapshot().Routable()) == 0 {
		return flowcontrol.NoEndpoint
	}
	return g.c.Enqueue(ctx, it)
}

// Started implements extproc.FlowController.
func (g *flowGate) Started(it *flowcontrol.Item) {
	g.mu.Lock()
	_, ok := g.picked[it]
	delete(g.picked, it)
	g.mu.Unlock()
	if ok {
		g.pending.Add(-1)
		g.c.Notify()
	}
}

// pickTimeout bounds how long a released request may keep the pool
// "saturated" before it is scheduled: scheduling takes microseconds to
// milliseconds, so a pick older than this was not a dispatch (or its
// stream is stuck) and no longer holds the others back.
const pickTimeout = time.Second

// stillPending reports whether a released request is still waiting to be
// scheduled, forgetting picks older than pickTimeout.
func (g *flowGate) stillPending(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for it, at := range g.picked {
		if now.Sub(at) >= pickTimeout {
			delete(g.picked, it)
			g.pending.Add(-1)
		}
	}
	return len(g.picked) > 0
}

// Notify implements extproc.FlowController.
func (g *flowGate) Notify() { g.c.Notify() }

// pickCounter wraps a band's fairness policy: a flow it picks gives up its
// head to the dispatcher (flowcontrol's selectLocked), which the gate
// marks as released-not-started.
type pickCounter struct {
	inner flowcontrol.FairnessPolicy
	g     *flowGate
}

func (p pickCounter) Pick(b *flowcontrol.Band) *flowcontrol.Flow {
	f := p.inner.Pick(b)
	if f == nil {
		return nil
	}
	if h := f.Head(); h != nil {
		p.g.mu.Lock()
		if _, ok := p.g.picked[h]; !ok {
			p.g.picked[h] = time.Now()
			p.g.pending.Add(1)
		}
		p.g.mu.Unlock()
	}
	return f
}

// flowPool is the dispatcher's view of the pool: the configuration's
// saturation detector over the routable endpoints, read from the
// published snapshot (no lock, no I/O). A configuration without a
// detector is never saturated.
type flowPool struct {
	s     *Server
	sched *scheduling.Scheduler
	det   scheduling.SaturationDetector
	gate  *flowGate
}

func (p *flowPool) Saturation() (float64, int) {
	cands := p.s.store.Snapshot().Routable()
	if len(cands) == 0 {
		return 1, 0
	}
	if p.gate.pending.Load() > 0 && p.gate.stillPending(time.Now()) {
		return 1, len(cands)
	}
	if p.det == nil {
		return 0, len(cands)
	}
	// Producers give detectors their per-request views (the in-flight
	// load of concurrency-detector).
	req := &scheduling.Request{}
	ctx := context.Background()
	p.sched.Prepare(ctx, req, cands)
	return p.det.Saturation(ctx, req, cands), len(cands)
}

// newFlowGate builds the flow controller of a configuration with the
// flowControl gate on; nil when it is off.
func (s *Server) newFlowGate(l *config.Loaded) (*flowGate, error) {
	if l.FlowControl == nil {
		return nil, nil
	}
	g := &flowGate{picked: map[*flowcontrol.Item]time.Time{}}
	cfg := *l.FlowControl
	wrap := func(b flowcontrol.BandConfig) flowcontrol.BandConfig {
		inner := b.Fairness
		if inner == nil {
			inner = flowcontrol.GlobalStrict{}
		}
		b.Fairness = pickCounter{inner: inner, g: g}
		return b
	}
	cfg.Bands = make([]flowcontrol.BandConfig, len(l.FlowControl.Bands))
	for i, b := range l.FlowControl.Bands {
		cfg.Bands[i] = wrap(b)
	}
	cfg.DefaultBand = wrap(cfg.DefaultBand)
	if cfg.DefaultNegativeBand != nil {
		nb := wrap(*cfg.DefaultNegativeBand)
		cfg.DefaultNegativeBand = &nb
	}
	g.pool = &flowPool{s: s, sched: l.Scheduler, det: l.SaturationDetector, gate: g}
	g.noEndpointWait = cfg.NoEndpointRequestTTL > 0
	c, err := flowcontrol.New(cfg, g.pool)
	if err != nil {
		return nil, err
	}
	g.c = c
	return g, nil
}

// flowRunner runs the flow controllers of the serving configuration and
// of retired ones until they drained.
type flowRunner struct {
	mu  sync.Mutex
	ctx context.Context // Server.Run's; nil before Run
	wg  sync.WaitGroup
}

// retireGrace is how long a retired configuration's controller keeps
// running after its queue emptied: streams that read the old runtime just
// before the reload may still enqueue.
const retireGrace = 2 * time.Second

// start runs g's dispatcher until stop or the server's end.
func (r *flowRunner) start(g *flowGate) {
	if g == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || g.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	g.cancel, g.done = cancel, make(chan struct{})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(g.done)
		g.c.Run(ctx)
	}()
}

// retire stops g once its queue is empty (and retireGrace passed), so the
// requests a reload finds waiting are dispatched, not refused.
func (r *flowRunner) retire(g *flowGate) {
	if g == nil || g.cancel == nil {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		empty := time.Time{}
		for {
			select {
			case <-g.done:
				return
			case now := <-t.C:
				if g.c.Stats().Requests > 0 {
					empty = time.Time{}
					continue
				}
				if empty.IsZero() {
					empty = now
				}
				if now.Sub(empty) >= retireGrace {
					g.cancel()
					return
				}
			}
		}
	}()
}

// run sets the server's context and starts the serving controller.
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
