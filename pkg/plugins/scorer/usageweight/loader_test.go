package usageweight_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/endpointsfile"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/strategy"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/usageweight"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

const head = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"

// withTerm is a profile with the usage-weight term alone before a
// round-robin strategy-picker whose threshold the term (at most 0.2) can
// reach.
const withTerm = head + `plugins:
  - type: usage-weight-scorer
    parameters:
      quotaAware: {enabled: true, ttl: 10s}
  - type: strategy-picker
    parameters: {scorerThreshold: 0.1}
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: usage-weight-scorer
      - pluginRef: strategy-picker
`

// withoutTerm is the same configuration without the term.
const withoutTerm = head + `plugins:
  - type: strategy-picker
    parameters: {scorerThreshold: 0.1}
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: strategy-picker
`

func load(t *testing.T, doc string, reg prometheus.Registerer, prev *config.Loaded) *config.Loaded {
	t.Helper()
	l, err := config.Load([]byte(doc), config.Options{Registry: plugins.InTree(), Context: context.Background(), Seed: 1, Registerer: reg, Previous: prev})
	require.NoError(t, err)
	return l
}

func pool(tpm int) []*scheduling.Endpoint {
	return schedulingtest.Endpoints(2, func(i int, b *schedulingtest.EndpointBuilder) {
		if tpm > 0 {
			b.Attr(usageweight.ProviderTPMAttribute, tpm)
		}
	})
}

// serve schedules one request, runs its hooks with the headers the chosen
// endpoint answers with, and returns the endpoint's name.
func serve(t *testing.T, l *config.Loaded, eps []*scheduling.Endpoint, headers func(name string) map[string]string) string {
	t.Helper()
	return serveUsage(t, l, eps, headers, 100)
}

// serveUsage is serve with the total tokens the response reports (0:
// none, so nothing is metered).
func serveUsage(t *testing.T, l *config.Loaded, eps []*scheduling.Endpoint, headers func(name string) map[string]string, tokens int) string {
	t.Helper()
	ctx := context.Background()
	req := &scheduling.Request{ID: "r", Model: "m"}
	res, err := l.Scheduler.Schedule(ctx, req, eps)
	require.NoError(t, err)
	target := res.Targets()[0]
	l.Scheduler.PreRequest(ctx, req, res)
	resp := &scheduling.Response{StatusCode: 200, Usage: scheduling.Usage{TotalTokens: tokens}}
	if headers != nil {
		resp.Headers = headers(target.Name())
	}
	l.Scheduler.ResponseReceived(ctx, req, resp, target)
	l.Scheduler.ResponseComplete(ctx, req, resp, target)
	return target.Name()
}

func names(t *testing.T, l *config.Loaded, eps []*scheduling.Endpoint, n int, headers func(string) map[string]string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = serve(t, l, eps, headers)
	}
	return out
}

// TestC37_UnmeteredEqualReplicasAlternateByStrategy: two replicas with
// equal budgets whose responses report no usage keep exactly equal
// remaining quotas: the term ties, so the round-robin strategy decides
// and they alternate.
func TestC37_UnmeteredEqualReplicasAlternateByStrategy(t *testing.T) {
	l := load(t, withTerm, prometheus.NewRegistry(), nil)
	defer l.Close()
	eps := pool(1_000_000)
	var got []string
	for range 8 {
		got = append(got, serveUsage(t, l, eps, nil, 0))
	}
	assert.Equal(t, []string{"ep-0", "ep-1", "ep-0", "ep-1", "ep-0", "ep-1", "ep-0", "ep-1"}, got)
}

// TestC37_MeteredReplicasBalanceByLeastUsage: with usage metered, each
// completed request makes the other replica strictly ahead, the term
// decides (strict dominance, no margin) and the split stays even: neither
// is ever more than one request ahead.
func TestC37_MeteredReplicasBalanceByLeastUsage(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := load(t, withTerm, reg, nil)
	defer l.Close()
	eps := pool(1_000_000)
	count := map[string]int{}
	for i := range 16 {
		count[serve(t, l, eps, nil)]++
		assert.LessOrEqual(t, abs(count["ep-0"]-count["ep-1"]), 1, "after %d: %v", i+1, count)
	}
	assert.Equal(t, map[string]int{"ep-0": 8, "ep-1": 8}, count)
	// Every response reports the same usage, so after each pair of
	// requests the replicas tie again and the strategy decides; the
	// other half of the passes are the term's.
	assert.Equal(t, 8.0, counter(t, reg, usageweight.UsageDecisionsMetric, "ep-0", usageweight.ReasonApplied)+
		counter(t, reg, usageweight.UsageDecisionsMetric, "ep-1", usageweight.ReasonApplied))
}

func abs(v int) int { return max(v, -v) }

// strictConfig is the term before a strategy-picker with its default
// scorerThreshold 0.3 and scorerMargin 0.05: the term (at most 0.2 of a
// total weight of 1) can reach neither.
const strictConfig = head + `plugins:
  - type: usage-weight-scorer
    parameters:
      quotaAware: {enabled: true, ttl: 10s}
  - type: strategy-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: usage-weight-scorer
      - pluginRef: strategy-picker
`

// TestC37_StrictDominanceThroughTheLoader: loaded from YAML with the
// picker's default threshold and margin, an endpoint with 0.9 of its quota
// left beats one with 0.8 (contributions 0.18 and 0.16: below the
// threshold, a lead under the margin) on every request; with equal
// remaining quotas the strategy alternates; with both exhausted (0) the
// strategy decides too.
func TestC37_StrictDominanceThroughTheLoader(t *testing.T) {
	for _, tc := range []struct {
		name      string
		remaining map[string]string
		want      []string
	}{
		{"0.9 vs 0.8", map[string]string{"ep-0": "80", "ep-1": "90"}, []string{"ep-1", "ep-1", "ep-1", "ep-1", "ep-1", "ep-1"}},
		{"equal", map[string]string{"ep-0": "90", "ep-1": "90"}, []string{"ep-0", "ep-1", "ep-0", "ep-1", "ep-0", "ep-1"}},
		{"exhausted", map[string]string{"ep-0": "0", "ep-1": "0"}, []string{"ep-0", "ep-1", "ep-0", "ep-1", "ep-0", "ep-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			l := load(t, strictConfig, reg, nil)
			defer l.Close()
			s := l.Plugins[usageweight.Type].(*usageweight.Scorer)
			eps := pool(0)
			headers := func(name string) map[string]string {
				return map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": tc.remaining[name]}
			}
			// Both observed once (no declaration: only the observations
			// make them take part).
			for _, e := range eps {
				s.ResponseReceived(context.Background(), &scheduling.Request{}, &scheduling.Response{StatusCode: 200, Headers: headers(e.Name())}, e)
			}
			got := names(t, l, eps, 6, headers)
			assert.Equal(t, tc.want, got)
			if tc.name == "0.9 vs 0.8" {
				assert.Equal(t, 6.0, counter(t, reg, usageweight.UsageDecisionsMetric, "ep-1", usageweight.ReasonApplied))
			}
		})
	}
}

// TestC37_C40_NearExhaustedGetsFewer: an endpoint whose OpenAI headers say
// it is near exhaustion gets no requests while its twin has budget; when
// its observation is stale (TTL 10s) it is back in the rotation, and with
// recovered headers the split alternates again.
func TestC37_C40_NearExhaustedGetsFewer(t *testing.T) {
	l := load(t, withTerm, prometheus.NewRegistry(), nil)
	defer l.Close()
	s := l.Plugins[usageweight.Type].(*usageweight.Scorer)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	s.SetClock(func() time.Time { return now })
	eps := schedulingtest.Endpoints(2, func(_ int, b *schedulingtest.EndpointBuilder) {
		b.Attr(usageweight.ProviderRPMAttribute, 1_000_000) // the RPM-only declaration
	})
	remaining := map[string]string{"ep-0": "2", "ep-1": "100"}
	headers := func(name string) map[string]string {
		return map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": remaining[name]}
	}
	first := names(t, l, eps, 2, headers) // both observed once
	assert.ElementsMatch(t, []string{"ep-0", "ep-1"}, first)
	got := names(t, l, eps, 10, headers)
	count := map[string]int{}
	for _, n := range got {
		count[n]++
	}
	assert.Equal(t, map[string]int{"ep-1": 10}, count, "the near-exhausted twin gets nothing while the other has budget")

	// ep-0's headers recover; ep-1's are unchanged. After the TTL both
	// snapshots are stale: each continues from the use metered since its
	// snapshot (none: the observing attempt is counted by the headers),
	// so the two tie, the strategy alternates, and each is observed fresh
	// at 1.0 again: the split stays even.
	remaining["ep-0"] = "100"
	now = now.Add(11 * time.Second)
	got = names(t, l, eps, 20, headers)
	count = map[string]int{}
	for _, n := range got {
		count[n]++
	}
	assert.InDelta(t, 10, count["ep-0"], 1, "%v", got)
	assert.InDelta(t, 10, count["ep-1"], 1, "%v", got)
}

// TestC40_RecoveredTwinKeepsGettingRequests: RPM-only declarations and
// request-axis headers. One endpoint was near exhaustion and recovers,
// its twin's headers never change; once the snapshots are stale, both
// keep getting requests (a twin that is not routed keeps the share it
// was last observed at, plus nothing metered since, and ties with the
// other's fresh 1.0 instead of starving behind it until the window
// rolls).
func TestC40_RecoveredTwinKeepsGettingRequests(t *testing.T) {
	l := load(t, withTerm, prometheus.NewRegistry(), nil)
	defer l.Close()
	s := l.Plugins[usageweight.Type].(*usageweight.Scorer)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	s.SetClock(func() time.Time { return now })
	eps := schedulingtest.Endpoints(2, func(_ int, b *schedulingtest.EndpointBuilder) {
		b.Attr(usageweight.ProviderRPMAttribute, 1000)
	})
	remaining := map[string]string{"ep-0": "2", "ep-1": "100"}
	headers := func(name string) map[string]string {
		return map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": remaining[name]}
	}
	names(t, l, eps, 12, headers)
	remaining["ep-0"] = "100"
	now = now.Add(11 * time.Second)
	for round := range 3 {
		got := names(t, l, eps, 10, headers)
		count := map[string]int{}
		for _, n := range got {
			count[n]++
		}
		assert.InDelta(t, 5, count["ep-0"], 1, "round %d: %v", round, got)
		assert.InDelta(t, 5, count["ep-1"], 1, "round %d: %v", round, got)
		now = now.Add(4 * time.Second)
	}
}

// TestC39_ReloadTogglesTheTerm: the term is on exactly when a profile
// references a usage-weight-scorer; adding it on reload registers it
// (scores and metrics), removing it closes the instance and deletes its
// series, and scheduling is then that of a configuration without it.
func TestC39_ReloadTogglesTheTerm(t *testing.T) {
	reg := prometheus.NewRegistry()
	eps := schedulingtest.Endpoints(2, func(i int, b *schedulingtest.EndpointBuilder) {
		if i == 1 {
			b.Attr(usageweight.ProviderTPMAttribute, 1000) // only ep-1 declares
		}
	})
	off := load(t, withoutTerm, reg, nil)
	assert.Equal(t, []string{"ep-0", "ep-1", "ep-0", "ep-1"}, names(t, off, eps, 4, nil))

	on := load(t, withTerm, reg, off)
	off.Release(on)
	_, ok := on.Plugins[usageweight.Type]
	require.True(t, ok)
	assert.Equal(t, []string{"ep-1", "ep-1", "ep-1"}, names(t, on, eps, 3, nil), "the lone declaring endpoint strictly dominates")
	assert.Equal(t, 3.0, counter(t, reg, usageweight.UsageDecisionsMetric, "ep-1", usageweight.ReasonApplied))

	again := load(t, withoutTerm, reg, on)
	on.Release(again)
	defer again.Close()
	_, ok = again.Plugins[usageweight.Type]
	assert.False(t, ok)
	assert.Equal(t, -1.0, counter(t, reg, usageweight.UsageDecisionsMetric, "ep-1", usageweight.ReasonApplied), "series deleted")
	assert.Equal(t, []string{"ep-0", "ep-1", "ep-0", "ep-1"}, names(t, again, eps, 4, nil), "as without the feature")
}

// counter returns the counter's value, -1 when the series does not exist.
func counter(t *testing.T, reg *prometheus.Registry, name, backend, reason string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var b, r string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "backend":
					b = l.GetValue()
				case "reason":
					r = l.GetValue()
				}
			}
			if b == backend && r == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestC39_ValidateWarnings: epp validate (plugins.EndpointWarnings) warns
// when the term is on and no endpoint declares limits, and when endpoints
// declare limits with the term off; not otherwise.
func TestC39_ValidateWarnings(t *testing.T) {
	on := load(t, withTerm, prometheus.NewRegistry(), nil)
	defer on.Close()
	off := load(t, withoutTerm, prometheus.NewRegistry(), nil)
	defer off.Close()
	plain := pool(0)
	declared := pool(1000)

	w := plugins.EndpointWarnings(on, plain)
	require.Len(t, w, 1)
	assert.Contains(t, w[0], `usage-weight-scorer "usage-weight-scorer" is in a scheduling profile, but no endpoint declares providerTpm or providerRpm`)
	assert.Contains(t, w[0], "quotaAware")
	assert.Empty(t, plugins.EndpointWarnings(on, declared))

	w = plugins.EndpointWarnings(off, declared)
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "endpoints ep-0, ep-1 declare providerTpm/providerRpm, but no scheduling profile uses a usage-weight-scorer")
	assert.Empty(t, plugins.EndpointWarnings(off, plain))

	// Weight 0 in the profile is off.
	zero := load(t, head+`plugins:
  - type: usage-weight-scorer
  - type: strategy-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: usage-weight-scorer
        weight: 0
      - pluginRef: strategy-picker
`, prometheus.NewRegistry(), nil)
	defer zero.Close()
	assert.Len(t, plugins.EndpointWarnings(zero, declared), 1)
	many := schedulingtest.Endpoints(7, func(_ int, b *schedulingtest.EndpointBuilder) { b.Attr(usageweight.ProviderRPMAttribute, 5) })
	assert.Contains(t, plugins.EndpointWarnings(off, many)[0], "ep-0, ep-1, ep-2, ep-3, ep-4 and 2 more")
}

// TestC39_ParameterErrorsHaveFieldPaths: weight and stalenessInterval
// errors name the plugin and the field.
func TestC39_ParameterErrorsHaveFieldPaths(t *testing.T) {
	_, err := config.Load([]byte(head+`plugins:
  - type: usage-weight-scorer
    parameters: {weight: 2, stalenessInterval: 2h}
  - type: strategy-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: usage-weight-scorer
      - pluginRef: strategy-picker
`), config.Options{Registry: plugins.InTree(), Context: context.Background()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `plugins[0] "usage-weight-scorer" (usage-weight-scorer): parameters: weight: must be a finite number in 0..1, got 2`)
	assert.Contains(t, err.Error(), "stalenessInterval: must be 1s..1h, got 2h0m0s")
}

// TestC39_MixedPoolSampleValidates: config/samples/usage-weight-mixed-pool.yaml
// with its example endpoints passes `epp validate --endpoints-file` clean
// (no loader, configuration or endpoint warning).
func TestC39_MixedPoolSampleValidates(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "config", "samples", "usage-weight-mixed-pool.yaml"))
	require.NoError(t, err)
	l := load(t, string(doc), prometheus.NewRegistry(), nil)
	defer l.Close()
	data, err := os.ReadFile(filepath.Join("testdata", "mixed-endpoints.yaml"))
	require.NoError(t, err)
	specs, err := endpointsfile.Parse(data)
	require.NoError(t, err)
	store := datastore.New(datastore.Options{})
	require.NoError(t, store.Replace(specs))
	eps := store.Snapshot().All()
	assert.Empty(t, l.Warnings)
	assert.Empty(t, plugins.ConfigWarnings(l))
	assert.Empty(t, plugins.EndpointWarnings(l, eps))
	s := l.Plugins[usageweight.Type].(*usageweight.Scorer)
	assert.True(t, s.QuotaAware())
	assert.Equal(t, 30*time.Second, s.TTLDuration())
	// The providers take part, the engines do not.
	scores := make([]float64, len(eps))
	s.Score(context.Background(), nil, eps, scores)
	got := map[string]float64{}
	for i, e := range eps {
		got[e.Name()] = scores[i]
	}
	assert.Equal(t, map[string]float64{"vllm-0": 0, "vllm-1": 0, "provider-a": 0.2, "provider-b": 0.2}, got)
	// The declarations reach the attributes the scorer reads.
	assert.Equal(t, datastore.ProviderTPMKey.Name(), usageweight.ProviderTPMAttribute)
	assert.Equal(t, datastore.ProviderRPMKey.Name(), usageweight.ProviderRPMAttribute)
}

// TestC38_AppliedOnlyWhenTheTermDecides: two replicas with equal budgets
// before a round-robin strategy-picker. When they tie (no usage, or equal
// usage) the strategy decides and no_differentiation counts against its
// choice; after a request to one, the other is strictly ahead, the term
// decides it (strict dominance) and applied counts against it.
func TestC38_AppliedOnlyWhenTheTermDecides(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := load(t, withTerm, reg, nil)
	defer l.Close()
	got := names(t, l, pool(1_000_000), 8, nil)
	// tie (strategy: ep-0), ep-1 ahead (term), tie (strategy: ep-1), ep-0
	// ahead (term), ...
	require.Equal(t, []string{"ep-0", "ep-1", "ep-1", "ep-0", "ep-0", "ep-1", "ep-1", "ep-0"}, got)
	for _, ep := range []string{"ep-0", "ep-1"} {
		assert.Equal(t, 2.0, counter(t, reg, usageweight.UsageDecisionsMetric, ep, usageweight.ReasonApplied), ep)
		assert.Equal(t, 2.0, counter(t, reg, usageweight.UsageDecisionsMetric, ep, usageweight.ReasonNoDifferentiation), ep)
	}
}

// TestC38_NotCountedWhenAnotherTermDecides: a second scorer (queue depth
// weight 1, ep-1's queue empty) decides every pass for ep-1 while the
// term ties (no declaration): nothing is counted.
func TestC38_NotCountedWhenAnotherTermDecides(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := load(t, withQueue, reg, nil)
	defer l.Close()
	eps := schedulingtest.Endpoints(2, func(i int, b *schedulingtest.EndpointBuilder) {
		if i == 0 {
			b.Queue(10)
		}
	})
	got := names(t, l, eps, 4, nil)
	require.Equal(t, []string{"ep-1", "ep-1", "ep-1", "ep-1"}, got)
	for _, ep := range []string{"ep-0", "ep-1"} {
		for _, r := range []string{usageweight.ReasonApplied, usageweight.ReasonNoDifferentiation, usageweight.ReasonNoDeclaration} {
			assert.Equal(t, -1.0, counter(t, reg, usageweight.UsageDecisionsMetric, ep, r), "%s %s", ep, r)
		}
	}
}

// withQueue adds a queue scorer beside the term.
const withQueue = head + `plugins:
  - type: usage-weight-scorer
  - type: queue-scorer
  - type: strategy-picker
    parameters: {scorerThreshold: 0.1}
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: usage-weight-scorer
      - pluginRef: queue-scorer
      - pluginRef: strategy-picker
`

// TestC38_NoDeclarationCountedWhenTheStrategyDecides: without any
// declaration the strategy decides every pass and each counts
// no_declaration against the chosen endpoint.
func TestC38_NoDeclarationCountedWhenTheStrategyDecides(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := load(t, withTerm, reg, nil)
	defer l.Close()
	names(t, l, pool(0), 4, nil)
	assert.Equal(t, 2.0, counter(t, reg, usageweight.UsageDecisionsMetric, "ep-0", usageweight.ReasonNoDeclaration))
	assert.Equal(t, 2.0, counter(t, reg, usageweight.UsageDecisionsMetric, "ep-1", usageweight.ReasonNoDeclaration))
	assert.Equal(t, -1.0, counter(t, reg, usageweight.UsageDecisionsMetric, "ep-0", usageweight.ReasonApplied))
}

// TestC38_DecidedByKeyIsTheStrategyPickers: the term reads the
// strategy-picker's record through the one typed key of pkg/scheduling,
// whose values are the picker's decided_by labels.
func TestC38_DecidedByKeyIsTheStrategyPickers(t *testing.T) {
	assert.Equal(t, []string{"scorers", "strategy"}, []string{strategy.DecidedByScorers, strategy.DecidedByStrategy})
	assert.Equal(t, []string{strategy.DecidedByScorers, strategy.DecidedByStrategy},
		[]string{scheduling.DecidedByScorers.String(), scheduling.DecidedByStrategy.String()})
}

// TestC37_TiedTermKeepsThresholdAndMargin: a usage term that ties (equal
// declared replicas, nothing metered) does not ask for strict dominance,
// so the strategy-picker's margin still applies to the other scorers: the
// queue scorer's lead (its whole weight, below the margin of the total
// weight) does not decide, and round-robin alternates as it does without
// the term.
func TestC37_TiedTermKeepsThresholdAndMargin(t *testing.T) {
	doc := head + `plugins:
  - type: usage-weight-scorer
  - type: queue-scorer
  - type: strategy-picker
    parameters: {scorerMargin: 1}
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: usage-weight-scorer
      - pluginRef: queue-scorer
      - pluginRef: strategy-picker
`
	l := load(t, doc, prometheus.NewRegistry(), nil)
	defer l.Close()
	eps := schedulingtest.Endpoints(2, func(i int, b *schedulingtest.EndpointBuilder) {
		b.Attr(usageweight.ProviderRPMAttribute, 1000).Queue(1 - i) // ep-1 has the shorter queue
	})
	var got []string
	for range 6 {
		got = append(got, serveUsage(t, l, eps, nil, 0)) // no usage: the term stays tied
	}
	assert.Equal(t, []string{"ep-0", "ep-1", "ep-0", "ep-1", "ep-0", "ep-1"}, got)
}
