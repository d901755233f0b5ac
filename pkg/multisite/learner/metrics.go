package learner

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// Metric names (seed-requirements.md §2.9).
const (
	MetricCeilingSoft = "grid_route_site_ceiling_soft"
	MetricCeilingHard = "grid_route_site_ceiling_hard"
	MetricCeiling     = "grid_route_site_ceiling"
	MetricRhoReported = "grid_route_site_rho_reported"
	MetricRhoCounted  = "grid_route_site_rho_counted"
	MetricRho         = "grid_route_site_rho"
	MetricWeight      = "grid_route_site_weight"
	MetricShedding    = "grid_route_shedding"
)

// maxRetainedSeries bounds the label values a gauge keeps for sites (or
// models) that left the topology (set to NaN, or 0, rather than deleted,
// §2.9): beyond it the oldest departed ones are deleted, so a churning
// topology cannot grow the registry without bound.
const maxRetainedSeries = 4 * sitestate.MaxSites

// Metrics are the learner's gauges: per (site, cluster) the bounds, the
// ceiling, the parts of rho and the draw weight (NaN without a reading),
// and per model the shedding state. Label values come from the topology
// only (closed sets: its sites and models).
type Metrics struct {
	soft, hard, ceiling, rhoReported, rhoCounted, rho, weight *prometheus.GaugeVec
	shedding                                                  *prometheus.GaugeVec

	sites  retained // site/cluster pairs
	models retained
	// children caches each pair's gauges (in siteVecs order).
	children map[string][7]prometheus.Gauge
}

// retained is the label values a gauge family has, in first-seen order,
// with whether the current topology still holds them.
type retained struct {
	order []string
	live  map[string]bool
}

// NewMetrics creates the gauges and registers them on reg (nil registers
// nothing).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		soft:        g(MetricCeilingSoft, "The soft bound of a site: the most in-flight seen with nothing waiting, decaying toward the floor (NaN: none learned).", "site", "cluster"),
		hard:        g(MetricCeilingHard, "The hard bound of a site: the least in-flight seen at a demonstrated limit, relaxing upward (NaN: none learned).", "site", "cluster"),
		ceiling:     g(MetricCeiling, "The ceiling of a site: max(ceiling floor, min(soft, hard)) (NaN: none learned).", "site", "cluster"),
		rhoReported: g(MetricRhoReported, "The KV-cache utilisation a site reports (NaN: no reading).", "site", "cluster"),
		rhoCounted:  g(MetricRhoCounted, "In-flight over the ceiling of a site (NaN: no ceiling).", "site", "cluster"),
		rho:         g(MetricRho, "The smoothed combined rho of a site, max(counted, reported) (NaN: no reading).", "site", "cluster"),
		weight:      g(MetricWeight, "The weight a site is drawn with: its ceiling, lifted by the explore floor (NaN: unknown capacity).", "site", "cluster"),
		shedding:    g(MetricShedding, "1 while a model is shed, 0 otherwise (model \"*\": the models no site names).", "model"),
		sites:       retained{live: map[string]bool{}},
		children:    map[string][7]prometheus.Gauge{},
		models:      retained{live: map[string]bool{}},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.soft, m.hard, m.ceiling, m.rhoReported, m.rhoCounted, m.rho, m.weight, m.shedding} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("site learner metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) siteVecs() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.soft, m.hard, m.ceiling, m.rhoReported, m.rhoCounted, m.rho, m.weight}
}

// pairKey joins a site and cluster (neither holds a NUL: both are
// DNS-1123 labels).
func pairKey(site, cluster string) string { return site + "\x00" + cluster }

func splitPair(k string) (string, string) {
	for i := 0; i < len(k); i++ {
		if k[i] == 0 {
			return k[:i], k[i+1:]
		}
	}
	return k, ""
}

// mark records the label values now live, and returns those that left.
func (r *retained) mark(now map[string]bool) (left []string) {
	for k := range r.live {
		r.live[k] = false
	}
	for k := range now {
		if _, ok := r.live[k]; !ok {
			r.order = append(r.order, k)
		}
		r.live[k] = true
	}
	for _, k := range r.order {
		if !r.live[k] {
			left = append(left, k)
		}
	}
	return left
}

// trim deletes the oldest departed values beyond maxRetainedSeries.
func (r *retained) trim(del func(k string)) {
	for len(r.order) > maxRetainedSeries {
		i := 0
		for i < len(r.order) && r.live[r.order[i]] {
			i++
		}
		if i == len(r.order) {
			return
		}
		k := r.order[i]
		r.order = append(r.order[:i], r.order[i+1:]...)
		delete(r.live, k)
		del(k)
	}
}

// set publishes one snapshot's values, and the shedding state.
func (m *Metrics) set(sn *sitestate.Snapshot, shed map[string]bool) {
	now := make(map[string]bool, len(sn.Sites))
	for i := range sn.Sites {
		s := &sn.Sites[i]
		k := pairKey(s.Name, s.Cluster)
		now[k] = true
		weight := math.NaN()
		if s.CapacityKnown {
			weight = s.Capacity
		}
		g, ok := m.children[k]
		if !ok {
			for j, v := range m.siteVecs() {
				g[j] = v.WithLabelValues(s.Name, s.Cluster)
			}
			m.children[k] = g
		}
		for j, v := range [7]float64{s.CeilingSoft, s.CeilingHard, s.Ceiling, s.RhoReported, s.RhoCounted, s.Rho, weight} {
			g[j].Set(v)
		}
	}
	for _, k := range m.sites.mark(now) {
		site, cluster := splitPair(k)
		for _, v := range m.siteVecs() {
			v.WithLabelValues(site, cluster).Set(math.NaN())
		}
	}
	m.sites.trim(func(k string) {
		delete(m.children, k)
		site, cluster := splitPair(k)
		for _, v := range m.siteVecs() {
			v.DeleteLabelValues(site, cluster)
		}
	})
	live := make(map[string]bool, len(shed))
	for model, on := range shed {
		live[model] = true
		v := 0.0
		if on {
			v = 1
		}
		m.shedding.WithLabelValues(model).Set(v)
	}
	for _, model := range m.models.mark(live) {
		m.shedding.WithLabelValues(model).Set(0)
	}
	m.models.trim(func(k string) { m.shedding.DeleteLabelValues(k) })
}
