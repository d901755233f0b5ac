package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
)

// EndpointState is one endpoint as /debug/endpoints reports it: what the
// picker knows and why it may or may not route there. Ready is false for
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

// PoolState is the /debug/endpoints document.
type PoolState struct {
	Synced    bool            `json:"synced"`
	FailOpen  bool            `json:"failOpen"`
	Endpoints []EndpointState `json:"endpoints"`
}

// State reports every endpoint's state.
func (s *Server) State() PoolState {
	snap := s.store.Snapshot()
	out := PoolState{Synced: snap.Synced, FailOpen: snap.FailOpen()}
	now := time.Now()
	for _, e := range snap.All() {
		m := e.Metrics()
		st := EndpointState{
			Name:    e.Name(),
			Address: e.HostPort(),
			Labels:  e.Metadata().Labels,
			Ready:   !snap.Stale(e),
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

func (s *Server) serveEndpoints(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.State())
}
