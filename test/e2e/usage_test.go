package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// usageConfig puts the usage-weight term, with quota-aware observation
// (TTL 5s; a metering window of an hour, so the whole test is one window
// however slow the machine), before a round-robin strategy-picker: the term decides by
// strict dominance whenever a candidate's contribution is above 0 (C-37).
const usageConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: usage-weight-scorer
  parameters:
    weight: 0.2
    stalenessInterval: 1h
    quotaAware: {enabled: true, ttl: 5s}
- type: strategy-picker
  parameters: {strategy: RoundRobin}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: usage-weight-scorer
  - pluginRef: strategy-picker
`

const adminToken = "e2e-admin-token-fedcba9876543210"

// TestC40_QuotaAwareThroughTheGateway: two equal modelsim endpoints behind
// the gateway, one answering with OpenAI rate-limit headers near
// exhaustion (2 of 100 requests left): it receives fewer requests than
// its twin; once its headers recover (100 of 100, set with the runtime
// control; its twin's are unchanged) and the old snapshots are stale,
// both tie and the strategy alternates again. The admin API answers
// 401 without its token and the documented JSON with it.
func TestC40_QuotaAwareThroughTheGateway(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600))
	c := startClusterWith(t, 2, clusterOpts{
		noConformance: true, config: usageConfig,
		simArgs:      [][]string{{"--ratelimit", "requests=2/100"}, {"--ratelimit", "requests=100/100"}},
		endpointYAML: []string{"providerRpm: 1000000", "providerRpm: 1000000"},
		eppArgs:      []string{"--admin-token-file", tokenFile},
	})
	send := func(phase string, n int) map[string]int {
		by := map[string]int{}
		for i := range n {
			res, err := c.post(context.Background(), fmt.Sprintf("%s-%d", phase, i), "/v1/completions",
				fmt.Sprintf(`{"model":%q,"prompt":"usage %s %d","max_tokens":2}`, modelName, phase, i))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.status, "%s %d: %s", phase, i, res.body)
			by[res.sim]++
		}
		t.Logf("%s: requests per endpoint %v", phase, by)
		return by
	}

	// Near exhaustion: once both were observed, sim-0 is avoided (a
	// snapshot going stale on a slow machine lets one request through).
	near := send("near", 24)
	require.Less(t, near["sim-0"], near["sim-1"], "%v", near)
	require.LessOrEqual(t, near["sim-0"], 1+24/10, "%v", near)

	// The admin API.
	for _, p := range []string{"/admin/backends", "/admin/stats/backends", "/admin/backends/sim-0/engine-stats", "/admin/prefix-routing/stats"} {
		code, _ := adminGet(t, c, p, "")
		require.Equal(t, http.StatusUnauthorized, code, p)
		code, _ = adminGet(t, c, p, metricsToken)
		require.Equal(t, http.StatusUnauthorized, code, "the metrics token does not open %s", p)
	}
	code, body := adminGet(t, c, "/admin/backends", adminToken)
	require.Equal(t, http.StatusOK, code, body)
	var backends struct {
		Synced   bool `json:"synced"`
		Backends []struct {
			Name        string `json:"name"`
			Address     string `json:"address"`
			ProviderRPM int    `json:"providerRpm"`
			Routable    bool   `json:"routable"`
		} `json:"backends"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &backends))
	require.True(t, backends.Synced)
	require.Len(t, backends.Backends, 2)
	require.Equal(t, "sim-0", backends.Backends[0].Name)
	require.Equal(t, c.simAddr[0], backends.Backends[0].Address)
	require.Equal(t, 1000000, backends.Backends[0].ProviderRPM)

	code, body = adminGet(t, c, "/admin/backends/sim-0/engine-stats", adminToken)
	require.Equal(t, http.StatusOK, code, body)
	var one struct {
		Name        string `json:"name"`
		EngineStats struct {
			Measured     bool     `json:"measured"`
			WaitingQueue *int     `json:"waitingQueue"`
			KVCacheUsage *float64 `json:"kvCacheUsage"`
		} `json:"engineStats"`
		Usage struct {
			Scorer         string `json:"scorer"`
			WindowRequests int64  `json:"windowRequests"`
		} `json:"usage"`
		Quota *struct {
			ObservedAt time.Time `json:"observedAt"`
			AgeSeconds float64   `json:"ageSeconds"`
			TTLSeconds float64   `json:"ttlSeconds"`
			Axes       map[string]struct {
				Ratio float64 `json:"ratio"`
			} `json:"axes"`
			Headers map[string]string `json:"headers"`
		} `json:"quota"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &one))
	require.Equal(t, "sim-0", one.Name)
	require.True(t, one.EngineStats.Measured, body)
	require.NotNil(t, one.EngineStats.WaitingQueue, body)
	require.Equal(t, "usage-weight-scorer", one.Usage.Scorer)
	require.Equal(t, int64(near["sim-0"]), one.Usage.WindowRequests, body)
	require.NotNil(t, one.Quota, body)
	require.Equal(t, 5.0, one.Quota.TTLSeconds)
	require.InDelta(t, 0.02, one.Quota.Axes["requests"].Ratio, 1e-9, body)
	require.Equal(t, map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "2"}, one.Quota.Headers)

	code, body = adminGet(t, c, "/admin/stats/backends", adminToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"quota": {`)
	code, body = adminGet(t, c, "/admin/prefix-routing/stats", adminToken)
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"pickers": []}`, body)

	// Recovery (the scenario): sim-0's headers say 100 of 100
	// again, sim-1's are unchanged. After the TTL both snapshots are
	// stale; each continues from the requests metered since it was made
	// (none: the observing request is counted by the headers), so both
	// lie at 1.0, tie, and the round-robin strategy decides; each is then
	// observed fresh at 1.0 and the shares keep tying: the split returns
	// to alternation.
	req, err := http.NewRequest(http.MethodPut, "http://"+c.simAddr[0]+"/modelsim/ratelimit",
		strings.NewReader(`{"limitRequests":100,"remainingRequests":100,"limitTokens":-1,"remainingTokens":-1}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	time.Sleep(5500 * time.Millisecond)
	after := send("recovered", 20)
	require.InDelta(t, 10, after["sim-0"], 1, "%v", after)
	require.InDelta(t, 10, after["sim-1"], 1, "%v", after)

	// The decision counters are on /metrics.
	byReason := seriesByLabel(t, c, "routing_usage_weight_decisions_total", "reason")
	t.Logf("usage-weight decisions: %v", byReason)
	require.Positive(t, byReason["applied"], "%v", byReason)
	require.Positive(t, byReason["no_differentiation"], "%v", byReason)
	quota := seriesByLabel(t, c, "routing_quota_aware_decisions_total", "reason")
	t.Logf("quota-aware decisions: %v", quota)
	require.Positive(t, quota["observed_used"], "%v", quota)
}

func adminGet(t *testing.T, c *cluster, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.metrics+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
