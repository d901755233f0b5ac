package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// EndpointState is one endpoint as /debug/endpoints reports it: what the
// picker knows and why it may or may not route there. Routable says
// whether requests may go to it; when not, OutOfRotation says why
// (unhealthy: its active health checks failed; breaker_open: its circuit
// breaker is open; stale: its metrics are not fresh while other endpoints'
// are). Health is the active health check's verdict (unknown, healthy,
// unhealthy) and Breaker the circuit breaker's state (closed, open,
// half_open), with BreakerOpenUntil while open. Ready is false for
// an endpoint without fresh metrics (even when the pool fails open). When
// the last scrape left the endpoint's load unknown (a load metric NaN,
// ±Inf, negative or absent), LoadUnknown says which metric and why, and
// the load fields (waitingQueue, runningRequests, kvCacheUsage) are left
// out rather than showing zeros or older values; metricsAge is then the
// age of the last metrics whose load could be read.
type EndpointState struct {
	Name                string            `json:"name"`
	Address             string            `json:"address"`
	Labels              map[string]string `json:"labels,omitempty"`
	Ready               bool              `json:"ready"`
	Routable            bool              `json:"routable"`
	State               string            `json:"state"`
	OutOfRotation       string            `json:"outOfRotation,omitempty"`
	Health              string            `json:"health"`
	Breaker             string            `json:"breaker"`
	BreakerOpenUntil    string            `json:"breakerOpenUntil,omitempty"`
	Weight              int               `json:"weight"`
	Internal            bool              `json:"internal,omitempty"`
	Models              []string          `json:"models,omitempty"`
	LoadUnknown         string            `json:"loadUnknown,omitempty"`
	WaitingQueue        *int              `json:"waitingQueue,omitempty"`
	RunningRequests     *int              `json:"runningRequests,omitempty"`
	KVCacheUsage        *float64          `json:"kvCacheUsage,omitempty"`
	ActiveLoRAs         []string          `json:"activeLoras,omitempty"`
	MetricsAge          string            `json:"metricsAge,omitempty"`
	InFlightRequests    int64             `json:"inFlightRequests"`
	InFlightTokens      int64             `json:"inFlightTokens"`
	Served              uint64            `json:"served"`
	Errors              uint64            `json:"errors"`
	TTFT                string            `json:"ttftEWMA,omitempty"`
	E2E                 string            `json:"e2eEWMA,omitempty"`
	Engine              string            `json:"engine,omitempty"`
	LastScrapeError     string            `json:"lastScrapeError,omitempty"`
	ScrapeWarning       string            `json:"scrapeWarning,omitempty"`
	ConsecutiveFailures int               `json:"consecutiveScrapeFailures,omitempty"`
}

// PoolState is the /debug/endpoints document. FailOpen says that no
// endpoint has fresh metrics (Ready lists them all); RoutableFailOpen that
// no eligible endpoint has, so the eligible ones are routed to anyway;
// Routable counts the endpoints requests may go to.
type PoolState struct {
	Synced           bool            `json:"synced"`
	FailOpen         bool            `json:"failOpen"`
	RoutableFailOpen bool            `json:"routableFailOpen"`
	Routable         int             `json:"routable"`
	Endpoints        []EndpointState `json:"endpoints"`
}

// State reports every endpoint's state.
func (s *Server) State() PoolState {
	snap := s.store.Snapshot()
	out := PoolState{Synced: snap.Synced, FailOpen: snap.FailOpen(), RoutableFailOpen: snap.RoutableFailOpen(), Routable: len(snap.Routable())}
	now := time.Now()
	for _, e := range snap.All() {
		m := e.Metrics()
		st := EndpointState{
			Name:          e.Name(),
			Address:       e.HostPort(),
			Labels:        e.Metadata().Labels,
			Ready:         !snap.Stale(e),
			OutOfRotation: snap.OutOfRotation(e),
			State:         rotationState(snap, e, now),
			Health:        "unknown",
			Breaker:       "closed",
			Weight:        1,
		}
		st.Routable = st.OutOfRotation == ""
		if h, ok := scheduling.HealthKey.Get(e); ok && h != nil {
			st.Health = probeName(h.Probe())
			st.Breaker = breakerName(h.Breaker(now))
			if u := h.OpenUntil(); !u.IsZero() && st.Breaker == "open" {
				st.BreakerOpenUntil = u.UTC().Format(time.RFC3339Nano)
			}
		}
		if w, ok := scheduling.WeightKey.Get(e); ok {
			st.Weight = w
		}
		st.Internal, _ = scheduling.InternalKey.Get(e)
		if ms, ok := scheduling.ModelsKey.Get(e); ok && ms != nil {
			for _, me := range ms.Entries {
				st.Models = append(st.Models, me.Name)
			}
		}
		for name := range m.ActiveModels {
			st.ActiveLoRAs = append(st.ActiveLoRAs, name)
		}
		if !m.UpdateTime.IsZero() {
			st.MetricsAge = now.Sub(m.UpdateTime).Round(time.Millisecond).String()
		}
		if es, ok := datastore.StatsKey.Get(e); ok && es != nil {
			st.InFlightRequests = es.InFlight()
			st.InFlightTokens = es.InFlightTokens()
			st.Served = es.Served()
			st.Errors = es.Errors()
			if d := es.TTFT(); d > 0 {
				st.TTFT = d.String()
			}
			if d := es.E2E(); d > 0 {
				st.E2E = d.String()
			}
		}
		if ss, ok := s.store.ScrapeStatus(e.Key()); ok {
			st.Engine = ss.Engine
			st.LastScrapeError = ss.LastError
			st.LoadUnknown = ss.LoadUnknown
			st.ScrapeWarning = ss.Warning
			st.ConsecutiveFailures = ss.ConsecutiveFailures
		}
		if st.LoadUnknown == "" {
			st.WaitingQueue, st.RunningRequests, st.KVCacheUsage = &m.WaitingQueueSize, &m.RunningRequestsSize, &m.KVCacheUsagePercent
		} else {
			st.Ready = false
		}
		out.Endpoints = append(out.Endpoints, st)
	}
	return out
}

func probeName(p scheduling.ProbeState) string {
	switch p {
	case scheduling.ProbeHealthy:
		return "healthy"
	case scheduling.ProbeUnhealthy:
		return "unhealthy"
	}
	return "unknown"
}

func breakerName(b scheduling.BreakerState) string {
	switch b {
	case scheduling.BreakerOpen:
		return "open"
	case scheduling.BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

func (s *Server) serveEndpoints(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.State())
}
