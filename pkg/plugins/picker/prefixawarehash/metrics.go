package prefixawarehash

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pickmetrics"
)

// The values of the strategy label of
// continuum_prefix_routing_requests_total: how each pick was decided. The
// Continuum Router's guide names the metric but not its values; this is
// the closed set.
const (
	// StrategyPrefixHash: the request had a prefix key and the endpoint
	// its key hashes to was under the load bound.
	StrategyPrefixHash = "prefix_hash"
	// StrategyBoundedOverflow: the request had a prefix key, the endpoint
	// it hashes to had reached the bound, and the walk moved on to the next
	// endpoint on the ring under it.
	StrategyBoundedOverflow = "bounded_overflow"
	// StrategyModelHashFallback: no prefix key (none could be extracted,
	// or prefix routing is disabled): the model's hash chose, without a
	// load bound.
	StrategyModelHashFallback = "model_hash_fallback"
)

// Strategies returns the closed set of strategy label values.
func Strategies() []string {
	return []string{StrategyPrefixHash, StrategyBoundedOverflow, StrategyModelHashFallback}
}

// Metric names, as the Continuum Router's guide names them.
const (
	RequestsMetric     = "continuum_prefix_routing_requests_total"
	DistributionMetric = "continuum_prefix_routing_backend_distribution"
	CardinalityMetric  = "continuum_prefix_routing_prefix_cardinality"
)

// metrics are an instance's series. The vectors are shared by every
// instance on a registry (reused on registration) and split by the picker
// label.
type metrics struct {
	requests     *prometheus.CounterVec
	byStrategy   [3]prometheus.Counter // in Strategies() order
	distribution *pickmetrics.GaugeVec
	backends     *pickmetrics.Children[prometheus.Gauge]
	card         *cardinalityCollector
}

func newMetrics(reg prometheus.Registerer, picker string) (*metrics, error) {
	requests, err := pickmetrics.RegisterOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: RequestsMetric,
		Help: "Picks of prefix-aware-hash-picker instances by how they were decided: prefix_hash (the key's endpoint was under the load bound), bounded_overflow (it was full and the ring walk moved on), model_hash_fallback (no prefix key, or prefix routing disabled: the model's hash chose, unbounded).",
	}, []string{"picker", "strategy"}))
	if err != nil {
		return nil, err
	}
	dist, err := pickmetrics.NewGaugeVec(reg, prometheus.GaugeOpts{
		Name: DistributionMetric,
		Help: "Requests a prefix-aware-hash-picker instance sent to each backend (primary target) since it started; it only grows, so use rate() or increase() as for a counter. Backend names beyond 256 are folded into \"other\".",
	}, []string{"picker", "backend"})
	if err != nil {
		return nil, err
	}
	card, err := pickmetrics.RegisterOrReuse(reg, &cardinalityCollector{
		desc: prometheus.NewDesc(CardinalityMetric,
			"Distinct prefix keys a prefix-aware-hash-picker instance routed in the last completed one-minute window (a HyperLogLog estimate, about 3% standard error; the current window until one completes).",
			[]string{"picker"}, nil),
		sources: map[string][]*cardinality{},
	})
	if err != nil {
		return nil, err
	}
	m := &metrics{requests: requests, distribution: dist, card: card}
	for i, s := range Strategies() {
		m.byStrategy[i] = requests.WithLabelValues(picker, s)
	}
	m.backends = pickmetrics.NewChildren(dist.Backends, func(b string) prometheus.Gauge { return dist.WithLabelValues(picker, b) })
	return m, nil
}

// deleteSeries deletes the series labelled with the instance.
func (m *metrics) deleteSeries(picker string) {
	m.requests.DeletePartialMatch(prometheus.Labels{"picker": picker})
	m.distribution.DeletePartialMatch(prometheus.Labels{"picker": picker})
}

// cardinalityCollector reports the cardinality of every live instance,
// computed at scrape time. Instances add their sketch when built and
// remove it when closed; while a reload's new instance and the one it
// replaces are both alive, the newest is reported.
type cardinalityCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex // scrapes and instance (de)registration only
	sources map[string][]*cardinality
}

func (c *cardinalityCollector) add(picker string, s *cardinality) {
	c.mu.Lock()
	c.sources[picker] = append(c.sources[picker], s)
	c.mu.Unlock()
}

func (c *cardinalityCollector) remove(picker string, s *cardinality) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := slices.DeleteFunc(c.sources[picker], func(x *cardinality) bool { return x == s })
	if len(list) == 0 {
		delete(c.sources, picker)
		return
	}
	c.sources[picker] = list
}

// Describe implements prometheus.Collector.
func (c *cardinalityCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *cardinalityCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for picker, list := range c.sources {
		s := list[len(list)-1]
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, s.value(s.now()), picker)
	}
}

var _ prometheus.Collector = (*cardinalityCollector)(nil)
