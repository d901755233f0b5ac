package metrics

import (
	"math"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// PoolSample is one endpoint's state as the pool refresh loop sees it.
type PoolSample struct {
	// Name is the endpoint (pod) name: the model_server_pod and
	// model_server_endpoint label values.
	Name string
	// Ready reports fresh metrics (scraped within
	// --metrics-staleness-threshold). Only ready samples enter the
	// averages and the ready count.
	Ready bool
	// Queue is the model server's waiting-queue length.
	Queue int
	// Running is the number of requests the model server is running.
	Running int
	// KVUsage is the KV-cache utilisation in [0, 1].
	KVUsage float64
}

var (
	descPoolAvgKV      = prometheus.NewDesc(NamePoolAvgKVCache, "Mean KV-cache utilisation (0..1) of the pool's endpoints with fresh metrics.", []string{"name"}, nil)
	descPoolAvgQueue   = prometheus.NewDesc(NamePoolAvgQueueSize, "Mean waiting-queue length of the pool's endpoints with fresh metrics.", []string{"name"}, nil)
	descPoolAvgRunning = prometheus.NewDesc(NamePoolAvgRunning, "Mean number of running requests of the pool's endpoints with fresh metrics.", []string{"name"}, nil)
	descPoolReady      = prometheus.NewDesc(NamePoolReadyPods, "Number of the pool's endpoints with fresh metrics.", []string{"name"}, nil)
	descPoolPerPod     = prometheus.NewDesc(NamePoolPerPodQueueSize, "Waiting-queue length of each endpoint of the pool, stale ones included.", []string{"name", "model_server_pod"}, nil)
	descLLMDAvgKV      = prometheus.NewDesc(NameLLMDAvgKVCache, "Mean KV-cache utilisation (0..1) of the pool's endpoints with fresh metrics (llm-d router name).", []string{"name"}, nil)
	descLLMDAvgQueue   = prometheus.NewDesc(NameLLMDAvgQueueSize, "Mean waiting-queue length of the pool's endpoints with fresh metrics (llm-d router name).", []string{"name"}, nil)
	descLLMDAvgRunning = prometheus.NewDesc(NameLLMDAvgRunning, "Mean number of running requests of the pool's endpoints with fresh metrics (llm-d router name).", []string{"name"}, nil)
	descLLMDReady      = prometheus.NewDesc(NameLLMDReadyEndpoints, "Number of the pool's endpoints with fresh metrics (llm-d router name).", []string{"name"}, nil)
	descLLMDPerPod     = prometheus.NewDesc(NameLLMDPerEndpointQueue, "Waiting-queue length of each endpoint of the pool, stale ones included (llm-d router name).", []string{"name", "model_server_endpoint"}, nil)
)

// poolSnapshot is what one UpdatePool computed; Collect reads it as a whole,
// so a scrape never mixes two refreshes.
type poolSnapshot struct {
	pool                    string
	avgKV, avgQueue, avgRun float64
	ready                   int
	perPod                  []podQueue // deduplicated, in input order
}

type podQueue struct {
	name  string
	queue float64
}

// poolCollector exports the pool gauges from the latest snapshot. Endpoints
// that left the pool are simply absent from the next snapshot, so their
// per-pod series disappear without explicit deletes.
type poolCollector struct {
	snap atomic.Pointer[poolSnapshot]
}

func newPoolCollector() *poolCollector { return &poolCollector{} }

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolAvgKV, descPoolAvgQueue, descPoolAvgRunning, descPoolReady, descPoolPerPod,
		descLLMDAvgKV, descLLMDAvgQueue, descLLMDAvgRunning, descLLMDReady, descLLMDPerPod} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap.Load()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	for _, d := range []*prometheus.Desc{descPoolAvgKV, descLLMDAvgKV} {
		gauge(d, s.avgKV, s.pool)
	}
	for _, d := range []*prometheus.Desc{descPoolAvgQueue, descLLMDAvgQueue} {
		gauge(d, s.avgQueue, s.pool)
	}
	for _, d := range []*prometheus.Desc{descPoolAvgRunning, descLLMDAvgRunning} {
		gauge(d, s.avgRun, s.pool)
	}
	for _, d := range []*prometheus.Desc{descPoolReady, descLLMDReady} {
		gauge(d, float64(s.ready), s.pool)
	}
	for _, p := range s.perPod {
		gauge(descPoolPerPod, p.queue, s.pool, p.name)
		gauge(descLLMDPerPod, p.queue, s.pool, p.name)
	}
}

// UpdatePool recomputes the pool gauges from samples (the pool's current
// endpoints); the caller runs it every --refresh-prometheus-metrics-interval.
//
// The averages and the ready count cover Ready samples only, as GIE
// excludes endpoints with stale metrics; with no ready sample they are 0
// (GIE leaves the previous averages in place in that case, which reports a
// load that is gone). The per-pod queue gauges cover every sample, stale
// ones included, as GIE's collector does; a pod missing from samples loses
// its series. Samples are deduplicated by Name (the last one wins); a
// non-finite or negative KVUsage counts as 0.
func (m *Metrics) UpdatePool(samples []PoolSample) {
	if m == nil {
		return
	}
	m.poolCollector.snap.Store(computePool(m.pool, samples))
}

func computePool(pool string, samples []PoolSample) *poolSnapshot {
	s := &poolSnapshot{pool: sanitize(pool), perPod: make([]podQueue, 0, len(samples))}
	// Deduplicate on the label value: two names that sanitize to the same
	// value would otherwise make the scrape fail.
	names := make([]string, len(samples))
	last := make(map[string]int, len(samples)) // label value -> index of the sample that wins
	for i, p := range samples {
		names[i] = sanitize(p.Name)
		last[names[i]] = i
	}
	var kv float64
	var queue, running int
	for i, p := range samples {
		if last[names[i]] != i {
			continue
		}
		s.perPod = append(s.perPod, podQueue{name: names[i], queue: float64(p.Queue)})
		if !p.Ready {
			continue
		}
		s.ready++
		if u := p.KVUsage; u > 0 && !math.IsInf(u, 0) {
			kv += u
		}
		queue += p.Queue
		running += p.Running
	}
	if s.ready > 0 {
		n := float64(s.ready)
		s.avgKV, s.avgQueue, s.avgRun = kv/n, float64(queue)/n, float64(running)/n
	}
	return s
}
