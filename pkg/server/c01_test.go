package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// stubStrategyType is a picker standing in for any selection strategy: it
// picks uniformly at random among whatever it is given (its seeded
// source), so it would pick an out-of-rotation endpoint if one reached
// it.
const stubStrategyType = "stub-strategy-picker"

type stubStrategy struct {
	name string
	rng  *rand.Rand
}

func (p *stubStrategy) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: stubStrategyType, Name: p.name}
}

func (p *stubStrategy) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	// The chosen one first, then every other as a fallback: all of them
	// must be in rotation.
	i := p.rng.IntN(len(scored))
	scored[0], scored[i] = scored[i], scored[0]
	out := make([]*scheduling.Endpoint, len(scored))
	for j, s := range scored {
		out[j] = s.Endpoint
	}
	return &scheduling.ProfileResult{Targets: out}
}

var stubStrategyRegistration = scheduling.Registration{
	Type: stubStrategyType,
	Factory: scheduling.Typed(func() scheduling.NoParams { return scheduling.NoParams{} },
		func(name string, _ scheduling.NoParams, h scheduling.Handle) (*stubStrategy, error) {
			return &stubStrategy{name: name, rng: h.Rand(name)}, nil
		}),
}

// The eligibility plugins in front of the default profile (GIE's scorers
// and max-score-picker), or in front of the stub strategy.
const c01Config = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: served-model-filter
- type: caller-scope-filter
  parameters:
    internalCallers: [ops]
    callers:
      team-a: {allowedSelector: {matchLabels: {team: a}}}
      nobody: {allowedEndpoints: []}
- type: circuit-breaker
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: %[1]s
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: served-model-filter
  - pluginRef: caller-scope-filter
  - pluginRef: circuit-breaker
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: %[1]s
`

// c01Pool is a pool where most endpoints are out of rotation for one
// request (model llama, caller team-a), each for another reason, and the
// best by every scorer is one of them.
type c01Pool struct {
	store *datastore.Store
	// out maps each endpoint that must never be picked to why.
	out map[string]string
	in  []string
}

func newC01Pool(t *testing.T, fresh bool) *c01Pool {
	t.Helper()
	llama := []scheduling.ModelEntry{{Name: "llama-3-8b", Aliases: []string{"llama"}}}
	mistral := []scheduling.ModelEntry{{Name: "mistral"}}
	teamA := map[string]string{"team": "a"}
	specs := []datastore.EndpointSpec{
		{Name: "ok-0", Models: llama, Labels: teamA},
		{Name: "ok-1", Models: llama, Labels: teamA},
		{Name: "ok-open", Labels: teamA}, // declares nothing: serves every model
		{Name: "unhealthy", Models: llama, Labels: teamA},
		{Name: "breaker-open", Models: llama, Labels: teamA},
		{Name: "other-model", Models: mistral, Labels: teamA},
		{Name: "other-team", Models: llama, Labels: map[string]string{"team": "b"}},
		{Name: "internal", Models: llama, Labels: teamA, Internal: true},
	}
	for i := range specs {
		specs[i].Address = fmt.Sprintf("127.10.1.%d", i+1)
		specs[i].Port = 8000
	}
	s := datastore.New(datastore.Options{})
	require.NoError(t, s.Replace(specs))
	s.SetScrapingEnabled(true)
	targets, _ := s.Targets()
	for _, tg := range targets {
		// Out-of-rotation endpoints look best: idle, empty cache.
		m := scheduling.Metrics{WaitingQueueSize: 50, KVCacheUsagePercent: 0.9}
		if tg.Spec.Name != "ok-0" && tg.Spec.Name != "ok-1" && tg.Spec.Name != "ok-open" {
			m = scheduling.Metrics{}
		}
		if fresh {
			s.ReportScrape(tg.ID, datastore.ScrapeResult{Metrics: m})
		}
	}
	s.Flush()
	health := func(name string) *scheduling.EndpointHealth {
		e, ok := s.Snapshot().Lookup(name)
		require.True(t, ok)
		h, _ := scheduling.HealthKey.Get(e)
		return h
	}
	health("unhealthy").SetProbe(scheduling.ProbeUnhealthy)
	health("breaker-open").SetBreaker(scheduling.BreakerOpen, time.Now().Add(time.Hour))
	s.Flush()
	return &c01Pool{store: s, in: []string{"ok-0", "ok-1", "ok-open"}, out: map[string]string{
		"unhealthy":    "health check failed",
		"breaker-open": "circuit breaker open",
		"other-model":  "does not serve the model",
		"other-team":   "not allowed for the caller",
		"internal":     "internal, the caller is not",
	}}
}

// TestC01_OutOfRotationNeverPicked: an endpoint out of rotation —
// unhealthy, breaker open, not serving the requested model, not allowed
// for the caller, internal for an external caller — is never picked, by
// the default profile or by a strategy, over 1000 seeded requests, also
// when every endpoint's metrics are stale and the pool fails open.
func TestC01_OutOfRotationNeverPicked(t *testing.T) {
	for _, picker := range []string{"max-score-picker", stubStrategyType} {
		for _, fresh := range []bool{true, false} {
			t.Run(fmt.Sprintf("picker=%s/fresh=%v", picker, fresh), func(t *testing.T) {
				pool := newC01Pool(t, fresh)
				sn := pool.store.Snapshot()
				require.Equal(t, !fresh, sn.RoutableFailOpen(), "every endpoint stale: the pool fails open")
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				loaded, err := config.Load([]byte(fmt.Sprintf(c01Config, picker)), config.Options{
					Registry: plugins.InTree().MustRegister(stubStrategyRegistration),
					Context:  ctx, Registerer: prometheus.NewRegistry(), Seed: 42,
				})
				require.NoError(t, err)
				defer loaded.Close()
				rng := rand.New(rand.NewPCG(1, 2))
				picked := map[string]int{}
				for i := range 1000 {
					model := "llama"
					if i%3 == 0 {
						model = "llama-3-8b"
					}
					req := &scheduling.Request{
						ID: fmt.Sprint(i), Model: model, TargetModel: model,
						Prompt:  scheduling.Prompt{Text: fmt.Appendf(nil, "prompt %d", rng.IntN(50))},
						Headers: map[string]string{"x-switchyard-caller": "team-a"},
					}
					// As the ext_proc server does: the published routable set.
					res, err := loaded.Scheduler.Process(ctx, req, pool.store.Snapshot().Routable())
					require.NoError(t, err, "request %d", i)
					for _, e := range res.Targets() {
						if why, bad := pool.out[e.Name()]; bad {
							t.Fatalf("request %d picked %s (%s)", i, e.Name(), why)
						}
					}
					picked[res.Targets()[0].Name()]++
					require.Equal(t, "llama-3-8b", req.TargetModel, "the alias resolves to the served name")
					loaded.Scheduler.ResponseComplete(ctx, req, &scheduling.Response{StatusCode: 200, EndOfStream: true}, res.Targets()[0])
				}
				if picker == stubStrategyType {
					for _, name := range pool.in {
						require.Greater(t, picked[name], 200, "the strategy spreads over every endpoint in rotation: %v", picked)
					}
				}
				t.Logf("picks: %v", picked)
			})
		}
	}
}

// An ops (internal) caller gets the internal endpoint too, and a request
// for a model none serves, or from a caller left with nothing, is refused
// before any strategy runs.
func TestC01_ScopesAndRefusals(t *testing.T) {
	pool := newC01Pool(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded, err := config.Load([]byte(fmt.Sprintf(c01Config, stubStrategyType)), config.Options{
		Registry: plugins.InTree().MustRegister(stubStrategyRegistration), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 7,
	})
	require.NoError(t, err)
	defer loaded.Close()
	seen := map[string]bool{}
	for i := range 200 {
		req := &scheduling.Request{ID: fmt.Sprint(i), Model: "llama", TargetModel: "llama", Headers: map[string]string{"x-switchyard-caller": "ops"}}
		res, err := loaded.Scheduler.Process(ctx, req, pool.store.Snapshot().Routable())
		require.NoError(t, err)
		seen[res.Targets()[0].Name()] = true
		require.NotContains(t, []string{"unhealthy", "breaker-open", "other-model"}, res.Targets()[0].Name())
	}
	require.True(t, seen["internal"] && seen["other-team"], "ops may use internal endpoints and has the default scope: %v", seen)

	// A model no declaring endpoint serves goes to the one that declares
	// nothing (it serves every model).
	req := &scheduling.Request{Model: "gpt-9", TargetModel: "gpt-9", Headers: map[string]string{"x-switchyard-caller": "team-a"}}
	res, err := loaded.Scheduler.Process(ctx, req, pool.store.Snapshot().Routable())
	require.NoError(t, err)
	require.Equal(t, []string{"ok-open"}, names(res.Targets()))

	_, err = loaded.Scheduler.Process(ctx, &scheduling.Request{Model: "llama", TargetModel: "llama", Headers: map[string]string{"x-switchyard-caller": "nobody"}}, pool.store.Snapshot().Routable())
	var re *scheduling.RefusalError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 403, re.Refusal.StatusCode)
	require.Equal(t, "caller_not_allowed", re.Refusal.Reason)
}

func names(eps []*scheduling.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Name()
	}
	return out
}
