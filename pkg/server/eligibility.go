package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/metrics"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Rotation states of an endpoint, the closed label values of
// switchyard_endpoint_health and switchyard_endpoints.
const (
	// StateRoutable: requests may go to it.
	StateRoutable = "routable"
	// StateHalfOpen: routable, but its circuit breaker admits trial
	// requests only.
	StateHalfOpen = "half_open"
	// StateStale: eligible, but its metrics are not fresh while another
	// eligible endpoint's are.
	StateStale = datastore.OutStale
	// StateUnhealthy: an active health check took it out.
	StateUnhealthy = datastore.OutUnhealthy
	// StateBreakerOpen: its circuit breaker is open.
	StateBreakerOpen = datastore.OutBreakerOpen
)

var rotationStates = []string{StateRoutable, StateHalfOpen, StateStale, StateUnhealthy, StateBreakerOpen}

// rotationState returns an endpoint's rotation state as the snapshot
// published it (the breaker's half-open state read now).
func rotationState(sn *datastore.Snapshot, e *scheduling.Endpoint, now time.Time) string {
	if out := sn.OutOfRotation(e); out != "" {
		return out
	}
	if h, ok := scheduling.HealthKey.Get(e); ok && h.Breaker(now) == scheduling.BreakerHalfOpen {
		return StateHalfOpen
	}
	return StateRoutable
}

var (
	descEndpointHealth = prometheus.NewDesc("switchyard_endpoint_health",
		"Rotation state of each endpoint (1 for its current state): routable, half_open (circuit breaker admitting trial requests), "+
			"stale (metrics not fresh while other endpoints' are, or load unknown while another eligible endpoint's is readable), unhealthy (failed its active health checks), breaker_open. "+
			"At most 1000 endpoints, in name order; switchyard_endpoints counts them all.",
		[]string{"endpoint", "state"}, nil)
	descEndpoints = prometheus.NewDesc("switchyard_endpoints",
		"Number of the pool's endpoints in each rotation state (see switchyard_endpoint_health).",
		[]string{"state"}, nil)
)

// eligibilityCollector exports the endpoints' rotation states, computed
// from the published snapshot when scraped: nothing is updated on the
// request path, and endpoints that left have no series.
type eligibilityCollector struct {
	store *datastore.Store
	now   func() time.Time
}

func newEligibilityCollector(store *datastore.Store) *eligibilityCollector {
	return &eligibilityCollector{store: store, now: time.Now}
}

// Describe implements prometheus.Collector.
func (c *eligibilityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descEndpointHealth
	ch <- descEndpoints
}

// Collect implements prometheus.Collector.
func (c *eligibilityCollector) Collect(ch chan<- prometheus.Metric) {
	sn := c.store.Snapshot()
	now := c.now()
	counts := make(map[string]int, len(rotationStates))
	for i, e := range sn.All() {
		st := rotationState(sn, e, now)
		counts[st]++
		// The endpoint label is capped, as pkg/metrics caps endpoint
		// labels: a pool larger than that is counted, not listed.
		if i < metrics.MaxEndpointLabelValues {
			ch <- prometheus.MustNewConstMetric(descEndpointHealth, prometheus.GaugeValue, 1, e.Name(), st)
		}
	}
	for _, st := range rotationStates {
		ch <- prometheus.MustNewConstMetric(descEndpoints, prometheus.GaugeValue, float64(counts[st]), st)
	}
}
