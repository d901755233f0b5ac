package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

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
