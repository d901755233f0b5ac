package metrics

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Flow-control metric names: GIE v1.5.0's (pkg/epp/metrics), which its
// Flow Control dashboard row queries, and llm-d router's queue gauge.
const (
	NameFlowQueueDuration   = "inference_extension_flow_control_request_queue_duration_seconds"
	NameFlowEnqueueDuration = "inference_extension_flow_control_request_enqueue_duration_seconds"
	NameFlowDispatchCycle   = "inference_extension_flow_control_dispatch_cycle_duration_seconds"
	NameFlowQueueSize       = "inference_extension_flow_control_queue_size"
	NameFlowQueueBytes      = "inference_extension_flow_control_queue_bytes"
)

// Flow-control label bounds: fairness ids come from a request header (set
// by the gateway), priorities from InferenceObjectives.
const (
	// MaxFairnessLabelValues caps the distinct fairness_id values.
	MaxFairnessLabelValues = 100
	// MaxPriorityLabelValues caps the distinct priority values (flow
	// control has at most 64 bands).
	MaxPriorityLabelValues = 64
	// MaxFlowLabelPairs caps the distinct (fairness_id, priority) pairs:
	// the two caps above alone would allow their product (6,400 pairs,
	// times the models and, for the histograms, outcomes and buckets).
	// A pair past this cap is recorded as (other, its priority), so a flow
	// metric has at most MaxFlowLabelPairs + MaxPriorityLabelValues + 1
	// (fairness_id, priority) combinations.
	MaxFlowLabelPairs = 256
)

// FlowOutcomes is the closed set of the outcome label: GIE's QueueOutcome
// names. Another value is recorded as RejectedOther.
var FlowOutcomes = []string{"Dispatched", "RejectedCapacity", "RejectedOther", "EvictedTTL", "EvictedContextCancelled", "EvictedOther"}

var (
	flowQueueLabels   = []string{"fairness_id", "priority", "outcome", "inference_pool", "model_name", "target_model_name"}
	flowEnqueueLabels = []string{"fairness_id", "priority", "outcome"}
	// flowQueueBuckets and flowCycleBuckets are GIE's.
	flowQueueBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0}
	flowCycleBuckets = []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1}
)

// flowMetrics are the flow-control collectors.
type flowMetrics struct {
	queueDuration, enqueueDuration *prometheus.HistogramVec
	cycle                          prometheus.Observer
	size, bytes, llmd              *prometheus.GaugeVec

	series     sync.Map // flowKey -> *flowSeries
	cached     atomic.Int64
	fairness   *limiter
	priorities *limiter
	pairs      *pairLimiter
}

// pairLimiter admits at most max distinct (fairness_id, priority) label
// pairs, both already bounded. Like limiter, lookups are lock-free,
// admission takes mu, and a pair's decision is fixed at its first
// sighting (so a FlowWaiting +1 and its -1 land on the same series).
type pairLimiter struct {
	seen sync.Map // labelPair -> struct{}
	n    atomic.Int64
	max  int64
	mu   sync.Mutex
	// afterMiss, when set (tests only), runs after a first lookup misses.
	afterMiss func()
}

type labelPair struct{ fid, priority string }

// bound returns the fairness_id to record with priority: fid itself while
// the pair is admitted, OverflowLabelValue once the cap is spent.
func (l *pairLimiter) bound(fid, priority string) string {
	if fid == OverflowLabelValue {
		return fid
	}
	k := labelPair{fid, priority}
	if _, ok := l.seen.Load(k); ok {
		return fid
	}
	if l.afterMiss != nil {
		l.afterMiss()
	}
	if l.n.Load() >= l.max {
		if _, ok := l.seen.Load(k); ok {
			return fid
		}
		return OverflowLabelValue
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen.Load(k); ok {
		return fid
	}
	if l.n.Load() >= l.max {
		return OverflowLabelValue
	}
	l.seen.Store(labelPair{strings.Clone(fid), strings.Clone(priority)}, struct{}{})
	l.n.Add(1)
	return fid
}

type flowKey struct {
	fid           string
	priority      int
	model, target string
}

// flowSeries holds one flow's children, resolved on first use.
type flowSeries struct {
	size, bytes, llmd prometheus.Gauge
	labels            [5]string // fairness_id, priority, inference_pool, model_name, target_model_name
	queue, enqueue    [6]lazyFlowObserver
}

type lazyFlowObserver struct {
	once sync.Once
	o    prometheus.Observer
}

func registerFlowControl(r *registrar, llmd *prometheus.GaugeVec) *flowMetrics {
	f := &flowMetrics{
		queueDuration:   registerHist(r, NameFlowQueueDuration, "Time requests spent in flow control, from enqueue to their outcome, in seconds.", flowQueueBuckets, flowQueueLabels),
		enqueueDuration: registerHist(r, NameFlowEnqueueDuration, "Time flow control took to accept or refuse a request (not its wait), in seconds.", flowCycleBuckets, flowEnqueueLabels),
		size: registerVec(r, NameFlowQueueSize, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameFlowQueueSize,
			Help: "Requests currently held by flow control, by flow.",
		}, flowControlLabels)),
		bytes: registerVec(r, NameFlowQueueBytes, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameFlowQueueBytes,
			Help: "Bytes counted against flowControl.maxBytes (body capacity, parsed prompt copies, headers and a per-request overhead) of the requests currently queued by flow control, by flow.",
		}, flowControlLabels)),
		llmd:       llmd,
		fairness:   newLimiter(MaxFairnessLabelValues),
		priorities: newLimiter(MaxPriorityLabelValues),
		pairs:      &pairLimiter{max: MaxFlowLabelPairs},
	}
	f.cycle = registerHist(r, NameFlowDispatchCycle, "Time one dispatch cycle of flow control took, in seconds.", flowCycleBuckets, nil).WithLabelValues()
	return f
}

func (m *Metrics) flowSeries(fid string, priority int, model, target string) *flowSeries {
	f := m.fc
	if v, ok := f.series.Load(flowKey{fid, priority, model, target}); ok {
		return v.(*flowSeries)
	}
	bf := f.fairness.bound(fid)
	bp := f.priorities.bound(strconv.Itoa(priority))
	bf = f.pairs.bound(bf, bp)
	bm, bt := m.models.bound(model), m.models.bound(target)
	s := &flowSeries{labels: [5]string{bf, bp, m.pool, bm, bt}}
	s.size = f.size.WithLabelValues(s.labels[:]...)
	s.bytes = f.bytes.WithLabelValues(s.labels[:]...)
	s.llmd = f.llmd.WithLabelValues(s.labels[:]...)
	// Keyed by the raw values; a value over a bound shares the overflow
	// children, so paired Inc/Dec stay balanced either way. The cache of
	// raw keys is bounded too: past the cap, lookups resolve each time.
	if f.cached.Load() >= maxFlowSeriesCache {
		return s
	}
	v, loaded := f.series.LoadOrStore(flowKey{strings.Clone(fid), priority, strings.Clone(model), strings.Clone(target)}, s)
	if !loaded {
		f.cached.Add(1)
	}
	return v.(*flowSeries)
}

// maxFlowSeriesCache bounds the cache of resolved flows (the label bounds
// already bound the series; this bounds the raw keys that map to them).
const maxFlowSeriesCache = 10000

func outcomeIndex(outcome string) int {
	for i, o := range FlowOutcomes {
		if o == outcome {
			return i
		}
	}
	return 2 // RejectedOther
}

// FlowWaiting adds delta to inference_extension_flow_control_queue_size
// and llm_d_epp_flow_control_queue_size, and delta×bytes to
// inference_extension_flow_control_queue_bytes, of the flow
// {fairness_id, priority, inference_pool, model_name, target_model_name}
// (extproc.FlowRecorder).
func (m *Metrics) FlowWaiting(fairnessID string, priority int, model, target string, bytes int64, delta int) {
	if m == nil || delta == 0 {
		return
	}
	s := m.flowSeries(fairnessID, priority, model, target)
	s.size.Add(float64(delta))
	s.llmd.Add(float64(delta))
	s.bytes.Add(float64(int64(delta) * bytes))
}

// FlowDone observes a request's time in flow control (wait) in
// inference_extension_flow_control_request_queue_duration_seconds and the
// time its enqueue took in ..._request_enqueue_duration_seconds, by GIE
// outcome name (FlowOutcomes) (extproc.FlowRecorder).
func (m *Metrics) FlowDone(fairnessID string, priority int, model, target, outcome string, enqueue, wait time.Duration) {
	if m == nil {
		return
	}
	s := m.flowSeries(fairnessID, priority, model, target)
	i := outcomeIndex(outcome)
	q := &s.queue[i]
	q.once.Do(func() {
		q.o = m.fc.queueDuration.WithLabelValues(s.labels[0], s.labels[1], FlowOutcomes[i], s.labels[2], s.labels[3], s.labels[4])
	})
	q.o.Observe(max(wait, 0).Seconds())
	e := &s.enqueue[i]
	e.once.Do(func() { e.o = m.fc.enqueueDuration.WithLabelValues(s.labels[0], s.labels[1], FlowOutcomes[i]) })
	e.o.Observe(max(enqueue, 0).Seconds())
}

// FlowDispatchCycle observes one dispatch cycle in
// inference_extension_flow_control_dispatch_cycle_duration_seconds.
func (m *Metrics) FlowDispatchCycle(d time.Duration) {
	if m == nil || d < 0 {
		return
	}
	m.fc.cycle.Observe(d.Seconds())
}
