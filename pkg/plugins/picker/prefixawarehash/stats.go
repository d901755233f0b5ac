package prefixawarehash

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// RoutingStats is a read-only summary of one prefix-aware-hash-picker
// instance, for the admin API (/admin/prefix-routing/stats): the same
// numbers as its metrics.
type RoutingStats struct {
	// Picker is the instance's name.
	Picker string `json:"picker"`
	// Enabled is the instance's enabled parameter (prefix keys are used).
	Enabled bool `json:"enabled"`
	// LoadFactorEpsilon, MaxPrefixLength and VirtualNodes are its
	// parameters.
	LoadFactorEpsilon float64 `json:"loadFactorEpsilon"`
	MaxPrefixLength   int     `json:"maxPrefixLength"`
	VirtualNodes      int     `json:"virtualNodes"`
	// Requests counts its picks by strategy (prefix_hash,
	// bounded_overflow, model_hash_fallback), as
	// continuum_prefix_routing_requests_total.
	Requests map[string]uint64 `json:"requests"`
	// Backends are the requests sent to each backend since it started, as
	// continuum_prefix_routing_backend_distribution (names beyond 256
	// folded into "other").
	Backends map[string]uint64 `json:"backends"`
	// PrefixCardinality is the estimate of distinct prefix keys of the
	// last completed one-minute window, as
	// continuum_prefix_routing_prefix_cardinality.
	PrefixCardinality float64 `json:"prefixCardinality"`
}

// RoutingStats returns the instance's statistics. It reads the metric
// series, so it is for the admin API, not the request path.
func (p *Picker) RoutingStats() RoutingStats {
	name := p.TypedName().Name
	st := RoutingStats{
		Picker: name, Enabled: p.params.Enabled, LoadFactorEpsilon: p.params.LoadFactorEpsilon,
		MaxPrefixLength: p.params.MaxPrefixLength, VirtualNodes: p.params.VirtualNodes,
		Requests: map[string]uint64{}, Backends: map[string]uint64{},
		PrefixCardinality: p.card.value(p.now()),
	}
	for i, s := range Strategies() {
		var m dto.Metric
		if p.m.byStrategy[i].Write(&m) == nil {
			st.Requests[s] = uint64(m.GetCounter().GetValue())
		}
	}
	ch := make(chan prometheus.Metric, 64)
	go func() { p.m.distribution.Collect(ch); close(ch) }()
	for metric := range ch {
		var m dto.Metric
		if metric.Write(&m) != nil {
			continue
		}
		var picker, backend string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "picker":
				picker = l.GetValue()
			case "backend":
				backend = l.GetValue()
			}
		}
		if picker == name {
			st.Backends[backend] = uint64(m.GetGauge().GetValue())
		}
	}
	return st
}
