package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

// A profile without scorers: with --selection-strategy the strategy
// decides every pick, so each run shows the strategy's own distribution.
const strategyConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
`

// TestStrategiesThroughTheGateway runs each of the nine strategies, chosen
// with --selection-strategy, over four modelsim servers behind the gateway
// and checks the distribution of real requests. Requests are sent one at a
// time, so every endpoint is idle when the next one is picked.
func TestStrategiesThroughTheGateway(t *testing.T) {
	const n = 80
	priced := func(in, out float64) string {
		return fmt.Sprintf("models:\n- {name: %q, pricing: {input: %v, output: %v}}", modelName, in, out)
	}
	for _, tc := range []struct {
		strategy     string
		endpointYAML []string
		simArgs      [][]string
		// prompt builds request i's body.
		prompt func(i int) (path, body string)
		check  func(t *testing.T, bySim map[string]int, groups map[int]map[string]int)
		// metrics checks the EPP's metrics after the requests.
		metrics func(t *testing.T, c *cluster)
	}{
		{strategy: "RoundRobin", check: func(t *testing.T, bySim map[string]int, _ map[int]map[string]int) {
			requireEven(t, bySim, 4, n)
		}},
		{strategy: "weighted_round_robin", endpointYAML: []string{"weight: 1", "weight: 1", "weight: 2", "weight: 4"},
			check: func(t *testing.T, bySim map[string]int, _ map[int]map[string]int) {
				// Expected 10, 10, 20, 40 of 80.
				require.Greater(t, bySim["sim-3"], bySim["sim-2"], "%v", bySim)
				require.Greater(t, bySim["sim-3"], 25, "%v", bySim)
				require.Less(t, bySim["sim-0"]+bySim["sim-1"], 35, "%v", bySim)
			}},
		{strategy: "least-latency", simArgs: [][]string{nil, nil, nil, {"--extra-latency", "300ms"}},
			check: func(t *testing.T, bySim map[string]int, _ map[int]map[string]int) {
				// Each endpoint is tried once while unmeasured; the slow
				// one is then avoided.
				require.LessOrEqual(t, bySim["sim-3"], 2, "%v", bySim)
				require.GreaterOrEqual(t, bySim["sim-3"], 1, "an unmeasured endpoint gets a probe: %v", bySim)
			}},
		{strategy: "Random", check: func(t *testing.T, bySim map[string]int, _ map[int]map[string]int) {
			require.Len(t, bySim, 4, "%v", bySim)
			for sim, c := range bySim {
				require.InDelta(t, n/4, c, 14, "%s: %v", sim, bySim)
			}
		}},
		{strategy: "ConsistentHash", check: func(t *testing.T, bySim map[string]int, _ map[int]map[string]int) {
			require.Len(t, bySim, 1, "one model, one candidate set: one endpoint: %v", bySim)
		}},
		{strategy: "PrefixAwareHash", prompt: func(i int) (string, string) {
			return "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"system","content":"You are assistant number %d of the e2e suite."},{"role":"user","content":"question %d"}]}`, modelName, i%4, i)
		}, check: func(t *testing.T, _ map[string]int, groups map[int]map[string]int) {
			for g, bySim := range groups {
				best := 0
				for _, c := range bySim {
					best = max(best, c)
				}
				require.GreaterOrEqual(t, best, n/4-1, "system prompt %d sticks to one endpoint: %v", g, bySim)
			}
		}},
		{strategy: "EngineLoad", check: func(t *testing.T, bySim map[string]int, _ map[int]map[string]int) {
			// Idle engines are inside the deadband: the base strategy
			// (RoundRobin) decides.
			requireEven(t, bySim, 4, n)
		}, metrics: func(t *testing.T, c *cluster) {
			// ... and the picker says so: every pick held by the deadband
			// (strategy_hysteresis_hold), none ranked by engine load. A
			// scrape late on a loaded machine makes a pick a stale
			// fallback instead (also the base strategy), never a rank.
			byReason := seriesByLabel(t, c, "routing_engine_load_decisions_total", "reason")
			t.Logf("engine-load decisions by reason: %v", byReason)
			require.Zero(t, byReason["strategy_engine_load"], "%v", byReason)
			require.Equal(t, float64(n), byReason["strategy_hysteresis_hold"]+byReason["strategy_stale_fallback"], "%v", byReason)
			require.GreaterOrEqual(t, byReason["strategy_hysteresis_hold"], float64(n/2), "the deadband holds: %v", byReason)
		}},
		{strategy: "LeastBusy", check: func(t *testing.T, bySim map[string]int, _ map[int]map[string]int) {
			// All idle: ties take turns.
			requireEven(t, bySim, 4, n)
		}},
		{strategy: "LeastCost", endpointYAML: []string{priced(3, 15), priced(1, 5), priced(0.2, 0.8), priced(0.2, 0.9)},
			check: func(t *testing.T, bySim map[string]int, _ map[int]map[string]int) {
				require.Equal(t, map[string]int{"sim-2": n}, bySim, "the cheapest endpoint takes every request")
			}},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			c := startClusterWith(t, 4, clusterOpts{noConformance: true, config: strategyConfig, endpointYAML: tc.endpointYAML,
				simArgs: tc.simArgs, eppArgs: []string{"--selection-strategy", tc.strategy}})
			bySim := map[string]int{}
			groups := map[int]map[string]int{}
			for i := range n {
				path, body := "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"strategy %s request %d","max_tokens":2}`, modelName, tc.strategy, i)
				if tc.prompt != nil {
					path, body = tc.prompt(i)
				}
				res, err := c.post(context.Background(), fmt.Sprintf("%s-%d", tc.strategy, i), path, body)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, res.status, "request %d: %s", i, res.body)
				bySim[res.sim]++
				if groups[i%4] == nil {
					groups[i%4] = map[string]int{}
				}
				groups[i%4][res.sim]++
			}
			t.Logf("%s: requests per endpoint %v", tc.strategy, bySim)
			tc.check(t, bySim, groups)
			m, err := scrapeWithToken(context.Background(), c.metrics+"/metrics", c.token)
			require.NoError(t, err)
			require.NotNil(t, m["switchyard_strategy_decisions_total"], "the strategy picker counts its decisions")
			// The override is logged with its exact wording: the flag's
			// choice, and the loader's replacement of the profile's picker.
			canonical, _, err := strategies.Parse(tc.strategy)
			require.NoError(t, err)
			log := strings.Join(c.epp.lines(), "\n")
			require.Contains(t, log, `"msg":"Selection strategy chosen outside the configuration","strategy":"`+canonical+`","from":"--selection-strategy"`)
			note, err := json.Marshal(fmt.Sprintf(`schedulingProfiles[0] "default": its picker max-score-picker is replaced by the strategy-picker "strategy-picker" with strategy %s (chosen by --selection-strategy or %s) and maxNumOfEndpoints 1; the profile's scorers decide first when one endpoint scores clearly highest`, canonical, strategies.EnvVar))
			require.NoError(t, err)
			require.Contains(t, log, `"msg":"Selection strategy override","note":`+string(note))
			if tc.metrics != nil {
				tc.metrics(t, c)
			}
		})
	}
}

// seriesByLabel returns a counter family's values by one label's value,
// scraped from the EPP.
func seriesByLabel(t *testing.T, c *cluster, family, label string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, c.metrics+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, m := range fams[family].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// requireEven checks that k endpoints shared n requests evenly (±1).
func requireEven(t *testing.T, bySim map[string]int, k, n int) {
	t.Helper()
	require.Len(t, bySim, k, "%v", bySim)
	for sim, c := range bySim {
		require.InDelta(t, n/k, c, 1, "%s: %v", sim, bySim)
	}
}
