package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// TestDebugEndpointsLoadUnknown: /debug/endpoints shows an endpoint whose
// load cannot be read as not ready, with the reason, and without load
// values (neither zeros nor older ones) that would read as idle.
func TestDebugEndpointsLoadUnknown(t *testing.T) {
	store := datastore.New(datastore.Options{})
	store.SetScrapingEnabled(true)
	require.NoError(t, store.Replace([]datastore.EndpointSpec{
		{Name: "good", Address: "127.0.0.1", Port: 8000},
		{Name: "nan", Address: "127.0.0.2", Port: 8000},
		{Name: "down", Address: "127.0.0.3", Port: 8000},
	}))
	ids := map[string]uint64{}
	targets, _ := store.Targets()
	for _, tg := range targets {
		ids[tg.Spec.Name] = tg.ID
	}
	for _, name := range []string{"good", "nan", "down"} {
		store.ReportScrape(ids[name], datastore.ScrapeResult{Metrics: scheduling.Metrics{WaitingQueueSize: 2, KVCacheUsagePercent: 0.5}, Engine: "vllm"})
	}
	const reason = "vllm:num_requests_waiting is NaN"
	store.ReportScrape(ids["nan"], datastore.ScrapeResult{LoadUnknown: reason, Engine: "vllm"})
	store.ReportScrape(ids["down"], datastore.ScrapeResult{Err: errors.New("connection refused")})
	store.Flush()

	s := &Server{store: store}
	srv := httptest.NewServer(http.HandlerFunc(s.serveEndpoints))
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	var doc struct {
		FailOpen  bool                         `json:"failOpen"`
		Endpoints []map[string]json.RawMessage `json:"endpoints"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	assert.False(t, doc.FailOpen)
	byName := map[string]map[string]json.RawMessage{}
	for _, e := range doc.Endpoints {
		var name string
		require.NoError(t, json.Unmarshal(e["name"], &name))
		byName[name] = e
	}
	require.Len(t, byName, 3)

	nan := byName["nan"]
	assert.JSONEq(t, `false`, string(nan["ready"]))
	assert.JSONEq(t, `"`+reason+`"`, string(nan["loadUnknown"]))
	for _, k := range []string{"waitingQueue", "runningRequests", "kvCacheUsage", "lastScrapeError"} {
		assert.NotContains(t, nan, k)
	}
	assert.JSONEq(t, `1`, string(nan["consecutiveScrapeFailures"]))

	good := byName["good"]
	assert.JSONEq(t, `true`, string(good["ready"]))
	assert.NotContains(t, good, "loadUnknown")
	assert.JSONEq(t, `2`, string(good["waitingQueue"]))
	assert.JSONEq(t, `0`, string(good["runningRequests"]), "a known zero is shown")
	assert.JSONEq(t, `0.5`, string(good["kvCacheUsage"]))

	down := byName["down"]
	assert.JSONEq(t, `false`, string(down["ready"]))
	assert.NotContains(t, down, "loadUnknown")
	assert.JSONEq(t, `"connection refused"`, string(down["lastScrapeError"]))
	assert.JSONEq(t, `2`, string(down["waitingQueue"]), "a failed scrape keeps the last metrics, as before")
}

// TestDebugEndpointsEligibility: /debug/endpoints shows each endpoint's
// health, breaker state and why it is out of rotation, with its weight,
// models and internal flag; switchyard_endpoint_health and
// switchyard_endpoints export the rotation states.
func TestDebugEndpointsEligibility(t *testing.T) {
	store := datastore.New(datastore.Options{})
	require.NoError(t, store.Replace([]datastore.EndpointSpec{
		{Name: "ok", Address: "127.0.0.1", Port: 8000, Weight: 3, Models: []scheduling.ModelEntry{{Name: "m", Aliases: []string{"a"}}}},
		{Name: "sick", Address: "127.0.0.2", Port: 8000, Internal: true},
		{Name: "open", Address: "127.0.0.3", Port: 8000},
		{Name: "trial", Address: "127.0.0.4", Port: 8000},
	}))
	h := func(name string) *scheduling.EndpointHealth {
		e, _ := store.Snapshot().Lookup(name)
		v, _ := scheduling.HealthKey.Get(e)
		return v
	}
	h("ok").SetProbe(scheduling.ProbeHealthy)
	h("sick").SetProbe(scheduling.ProbeUnhealthy)
	until := time.Now().Add(time.Hour)
	h("open").SetBreaker(scheduling.BreakerOpen, until)
	h("trial").SetBreaker(scheduling.BreakerHalfOpen, time.Time{})
	store.Flush()

	st := (&Server{store: store}).State()
	assert.Equal(t, 2, st.Routable)
	assert.False(t, st.RoutableFailOpen)
	byName := map[string]EndpointState{}
	for _, e := range st.Endpoints {
		byName[e.Name] = e
	}
	assert.Equal(t, EndpointState{Name: "ok", Address: "127.0.0.1:8000", Ready: true, Routable: true, State: StateRoutable,
		Health: "healthy", Breaker: "closed", Weight: 3, Models: []string{"m"}, WaitingQueue: byName["ok"].WaitingQueue,
		RunningRequests: byName["ok"].RunningRequests, KVCacheUsage: byName["ok"].KVCacheUsage}, byName["ok"])
	assert.Equal(t, "unhealthy", byName["sick"].OutOfRotation)
	assert.Equal(t, "unhealthy", byName["sick"].Health)
	assert.True(t, byName["sick"].Internal)
	assert.False(t, byName["sick"].Routable)
	assert.Equal(t, "breaker_open", byName["open"].OutOfRotation)
	assert.Equal(t, "open", byName["open"].Breaker)
	assert.Equal(t, until.UTC().Format(time.RFC3339Nano), byName["open"].BreakerOpenUntil)
	assert.Equal(t, StateHalfOpen, byName["trial"].State)
	assert.True(t, byName["trial"].Routable)

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(newEligibilityCollector(store)))
	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			k := f.GetName()
			for _, l := range m.GetLabel() {
				k += "," + l.GetName() + "=" + l.GetValue()
			}
			got[k] = m.GetGauge().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{
		"switchyard_endpoint_health,endpoint=ok,state=routable":       1,
		"switchyard_endpoint_health,endpoint=sick,state=unhealthy":    1,
		"switchyard_endpoint_health,endpoint=open,state=breaker_open": 1,
		"switchyard_endpoint_health,endpoint=trial,state=half_open":   1,
		"switchyard_endpoints,state=routable":                         1,
		"switchyard_endpoints,state=half_open":                        1,
		"switchyard_endpoints,state=stale":                            0,
		"switchyard_endpoints,state=unhealthy":                        1,
		"switchyard_endpoints,state=breaker_open":                     1,
	}, got)
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
}
