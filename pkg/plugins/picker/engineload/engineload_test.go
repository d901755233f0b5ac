package engineload

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

// fakeBase is a base strategy: it rotates over what it is given, and
// records each call's candidates and profile info.
type fakeBase struct {
	name  scheduling.TypedName
	max   int
	mu    sync.Mutex
	turn  int
	calls [][]string
	infos []scheduling.PickInfo
}

func (f *fakeBase) TypedName() scheduling.TypedName { return f.name }

func (f *fakeBase) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, len(scored))
	for i := range scored {
		names[i] = scored[i].Endpoint.Name()
	}
	f.calls = append(f.calls, names)
	k := min(max(f.max, 1), len(scored))
	targets := make([]*scheduling.Endpoint, k)
	for i := range targets {
		targets[i] = scored[(f.turn+i)%len(scored)].Endpoint
	}
	f.turn++
	return &scheduling.ProfileResult{Targets: targets}
}

// fakeProfileBase is a base strategy that wants the profile's info.
type fakeProfileBase struct{ fakeBase }

func (f *fakeProfileBase) PickInProfile(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	f.mu.Lock()
	f.infos = append(f.infos, info)
	f.mu.Unlock()
	return f.Pick(ctx, req, scored)
}

var now = time.Unix(1_700_000_100, 0)

// setup builds a picker named "el" over a fake base of the strategy's
// type, registered in the handle as the loader would.
func setup(t testing.TB, reg prometheus.Registerer, log logr.Logger, mutate func(*Params)) (*Picker, *fakeBase) {
	t.Helper()
	p := DefaultParams()
	if mutate != nil {
		mutate(&p)
	}
	_, typ, err := strategies.Parse(p.BaseStrategy)
	if err != nil {
		typ = "round-robin-picker"
	}
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Logger: log, Seed: 1})
	base := &fakeBase{name: scheduling.TypedName{Type: typ, Name: "el/base"}, max: p.MaxNumOfEndpoints}
	h.AddPlugin("el/base", base)
	pk, err := New("el", p, h)
	if err != nil {
		t.Fatal(err)
	}
	pk.now = func() time.Time { return now }
	return pk, base
}

// eps builds endpoints ep-0 … with the given waiting queues, scraped at
// now (fresh).
func eps(waiting ...int) []scheduling.ScoredEndpoint {
	out := make([]scheduling.ScoredEndpoint, len(waiting))
	for i, w := range waiting {
		out[i] = scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint(fmt.Sprintf("ep-%d", i)).Queue(w).UpdateTime(now).Build()}
	}
	return out
}

func TestParams(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		check    func(*testing.T, *Picker)
		wantErrs []string
	}{
		{name: "defaults", check: func(t *testing.T, p *Picker) {
			if p.params.BalanceAbsThreshold != 64 || p.params.BalanceRelThreshold != 1.5 || p.params.BaseStrategy != "RoundRobin" ||
				p.params.MaxStalenessIntervals != 3 || p.params.ScrapeInterval.Duration != 50*time.Millisecond || p.Max != 1 {
				t.Errorf("defaults = %+v", p.params)
			}
			if p.horizon != 150*time.Millisecond {
				t.Errorf("horizon = %v, want 3 × 50ms", p.horizon)
			}
		}},
		{name: "every field", raw: `{"balanceAbsThreshold": 10, "balanceRelThreshold": 2, "baseStrategy": "weighted_round_robin", "baseStrategyParameters": {}, "maxStalenessIntervals": 2, "scrapeInterval": "1s", "maxNumOfEndpoints": 2}`,
			check: func(t *testing.T, p *Picker) {
				if p.params.BalanceAbsThreshold != 10 || p.params.BalanceRelThreshold != 2 || p.BaseStrategy() != "WeightedRoundRobin" ||
					p.horizon != 2*time.Second || p.Max != 2 {
					t.Errorf("params = %+v, horizon %v", p.params, p.horizon)
				}
				if p.BasePicker().TypedName().Type != "weighted-round-robin-picker" {
					t.Errorf("base = %v", p.BasePicker().TypedName())
				}
			}},
		{name: "zero thresholds", raw: `{"balanceAbsThreshold": 0, "balanceRelThreshold": 1}`},
		{name: "base EngineLoad", raw: `{"baseStrategy": "EngineLoad"}`, wantErrs: []string{"baseStrategy: must not be EngineLoad"}},
		{name: "base engine-load", raw: `{"baseStrategy": "engine-load"}`, wantErrs: []string{"baseStrategy: must not be EngineLoad"}},
		{name: "unknown base", raw: `{"baseStrategy": "Fastest"}`, wantErrs: []string{`baseStrategy: unknown strategy "Fastest"; valid: RoundRobin`}},
		{name: "base parameters with maxNumOfEndpoints", raw: `{"baseStrategyParameters": {"maxNumOfEndpoints": 2}}`, wantErrs: []string{"baseStrategyParameters: maxNumOfEndpoints: not allowed here"}},
		{name: "base parameters not an object", raw: `{"baseStrategyParameters": [1]}`, wantErrs: []string{"baseStrategyParameters: expected an object"}},
		{name: "negative abs", raw: `{"balanceAbsThreshold": -1}`, wantErrs: []string{"balanceAbsThreshold: must be >= 0, got -1"}},
		{name: "rel below 1", raw: `{"balanceRelThreshold": 0.9}`, wantErrs: []string{"balanceRelThreshold: must be a finite number >= 1, got 0.9"}},
		{name: "zero intervals", raw: `{"maxStalenessIntervals": 0}`, wantErrs: []string{"maxStalenessIntervals: must be 1..1000, got 0"}},
		{name: "zero scrape interval", raw: `{"scrapeInterval": "0s"}`, wantErrs: []string{`scrapeInterval: must be > 0, got "0s"`}},
		{name: "bad duration", raw: `{"scrapeInterval": "fast"}`, wantErrs: []string{`scrapeInterval: invalid duration "fast"`}},
		{name: "number duration", raw: `{"scrapeInterval": 50}`, wantErrs: []string{"scrapeInterval: expected a string"}},
		{name: "unknown key", raw: `{"engineStats": true}`, wantErrs: []string{`unknown field "engineStats"`}},
		{name: "maxNumOfEndpoints", raw: `{"maxNumOfEndpoints": 0}`, wantErrs: []string{"maxNumOfEndpoints: must be >= 1, got 0"}},
		{name: "every problem", raw: `{"balanceAbsThreshold": -1, "balanceRelThreshold": 0, "baseStrategy": "EngineLoad", "maxStalenessIntervals": 0, "scrapeInterval": "-1s", "maxNumOfEndpoints": 0}`,
			wantErrs: []string{"balanceAbsThreshold", "balanceRelThreshold", "baseStrategy", "maxStalenessIntervals", "scrapeInterval", "maxNumOfEndpoints"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw json.RawMessage
			if tt.raw != "" {
				raw = json.RawMessage(tt.raw)
			}
			typ := "round-robin-picker"
			var probe Params
			if json.Unmarshal(raw, &probe) == nil && probe.BaseStrategy != "" {
				if _, pt, err := strategies.Parse(probe.BaseStrategy); err == nil {
					typ = pt
				}
			}
			h := schedulingtest.NewHandle(t)
			h.AddPlugin("el/base", &fakeBase{name: scheduling.TypedName{Type: typ, Name: "el/base"}})
			got, err := Registration.Factory("el", raw, h)
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("factory succeeded, want %q", tt.wantErrs)
				}
				if n := len(scheduling.Errors(err)); n != len(tt.wantErrs) {
					t.Errorf("%d problems (%v), want %d", n, err, len(tt.wantErrs))
				}
				for _, w := range tt.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.TypedName() != (scheduling.TypedName{Type: Type, Name: "el"}) {
				t.Errorf("TypedName = %v", got.TypedName())
			}
			if tt.check != nil {
				tt.check(t, got.(*Picker))
			}
			if eff, _ := h.Params("el"); eff.(Params).BaseStrategy != got.(*Picker).BaseStrategy() {
				t.Errorf("effective parameters keep %q, want the canonical name", eff.(Params).BaseStrategy)
			}
		})
	}
}

// TestC19_BaseStrategyInstance: the base is the loader's "<name>/base"
// instance; without it, or with one of another type, construction fails
// with a clear error.
func TestC19_BaseStrategyInstance(t *testing.T) {
	h := schedulingtest.NewHandle(t)
	if _, err := New("el", DefaultParams(), h); err == nil || !strings.Contains(err.Error(), `baseStrategy: no round-robin-picker instance "el/base": the configuration loader builds it`) {
		t.Errorf("missing base: err = %v", err)
	}
	h.AddPlugin("el/base", &fakeBase{name: scheduling.TypedName{Type: "random-picker", Name: "el/base"}})
	if _, err := New("el", DefaultParams(), h); err == nil || !strings.Contains(err.Error(), `baseStrategy: instance "el/base" is a random-picker, want a round-robin-picker for RoundRobin`) {
		t.Errorf("wrong type: err = %v", err)
	}
	h.AddPlugin("el/base", notAPicker{})
	if _, err := New("el", DefaultParams(), h); err == nil || !strings.Contains(err.Error(), "is not a picker") {
		t.Errorf("not a picker: err = %v", err)
	}
	if _, err := New("el", DefaultParams(), nil); err == nil {
		t.Error("nil handle accepted")
	}
	bad := DefaultParams()
	bad.BaseStrategy = "EngineLoad"
	if _, err := New("el", bad, schedulingtest.NewHandle(t)); err == nil || !strings.Contains(err.Error(), "must not be EngineLoad") {
		t.Errorf("base EngineLoad: err = %v", err)
	}
	// A base that wants the profile's info gets it.
	h2 := schedulingtest.NewHandle(t)
	pb := &fakeProfileBase{fakeBase{name: scheduling.TypedName{Type: "round-robin-picker", Name: "el/base"}}}
	h2.AddPlugin("el/base", pb)
	pk, err := New("el", DefaultParams(), h2)
	if err != nil {
		t.Fatal(err)
	}
	pk.now = func() time.Time { return now }
	info := scheduling.PickInfo{Profile: "p", TotalWeight: 3, Scorers: 2}
	pk.PickInProfile(t.Context(), nil, eps(1, 2), info)
	if len(pb.infos) != 1 || pb.infos[0] != info {
		t.Errorf("base infos = %v, want %v", pb.infos, info)
	}
}

type notAPicker struct{}

func (notAPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "round-robin-picker", Name: "el/base"}
}

// TestC19_MetricsWarnings: EngineLoad without engine metrics warns.
func TestC19_MetricsWarnings(t *testing.T) {
	full := []EngineMetrics{{Name: "vllm", WaitingQueue: true, KVCache: true}, {Name: "sglang", WaitingQueue: true, KVCache: true}}
	tests := []struct {
		name string
		dl   DataLayer
		want []string
	}{
		{name: "metrics scraped", dl: DataLayer{Scrapes: true, Engines: full}},
		{name: "no scraping", dl: DataLayer{}, want: []string{`engine-load-picker "el" reads waiting_requests and kv_cache_usage from scraped engine metrics, but the configuration scrapes none`}},
		{name: "engines without the queue", dl: DataLayer{Scrapes: true, Engines: append(slices.Clone(full), EngineMetrics{Name: "zeta", KVCache: true}, EngineMetrics{Name: "alpha"})},
			want: []string{"engine mappings alpha, zeta read no waiting-queue metric", "engine mappings alpha read no KV-cache metric"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MetricsWarnings("el", tt.dl)
			if len(got) != len(tt.want) {
				t.Fatalf("warnings = %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// TestC20_Outcomes: the three outcomes and who picks (§7 #8: gap 63 or
// ratio 1.4 hold; gap 65 with ratio 1.6 ranks by engine load; any stale
// candidate falls back), counted per chosen backend and reason.
func TestC20_Outcomes(t *testing.T) {
	stale := func(s []scheduling.ScoredEndpoint, i int, at time.Time) []scheduling.ScoredEndpoint {
		m := s[i].Endpoint.Metrics()
		s[i].Endpoint = schedulingtest.Endpoint(s[i].Endpoint.Name()).Queue(m.WaitingQueueSize).UpdateTime(at).Build()
		return s
	}
	tests := []struct {
		name       string
		scored     []scheduling.ScoredEndpoint
		wantReason string
		// wantEndpoint is the pick when engine load decides; "" when the
		// base strategy must have picked among wantBase.
		wantEndpoint string
		wantBase     []string
		// nilRequest picks for no request (a picker must cope): the
		// decision is counted, with no request to carry its reason.
		nilRequest bool
	}{
		{name: "gap 63 holds", scored: eps(0, 63), wantReason: ReasonHysteresisHold, wantBase: []string{"ep-0", "ep-1"}},
		{name: "gap 64 holds (must exceed)", scored: eps(10, 74), wantReason: ReasonHysteresisHold, wantBase: []string{"ep-0", "ep-1"}},
		{name: "ratio 1.4 holds", scored: eps(200, 280, 250), wantReason: ReasonHysteresisHold, wantBase: []string{"ep-0", "ep-1", "ep-2"}},
		{name: "ratio 1.5 holds (must exceed)", scored: eps(200, 300), wantReason: ReasonHysteresisHold, wantBase: []string{"ep-0", "ep-1"}},
		{name: "gap 65 ratio 1.6 ranks", scored: eps(173, 108, 150), wantReason: ReasonEngineLoad, wantEndpoint: "ep-1"},
		{name: "from zero", scored: eps(70, 0), wantReason: ReasonEngineLoad, wantEndpoint: "ep-1"},
		{name: "no request ranks", scored: eps(173, 108, 150), wantReason: ReasonEngineLoad, wantEndpoint: "ep-1", nilRequest: true},
		{name: "all idle holds", scored: eps(0, 0, 0), wantReason: ReasonHysteresisHold, wantBase: []string{"ep-0", "ep-1", "ep-2"}},
		{name: "one candidate holds", scored: eps(500), wantReason: ReasonHysteresisHold, wantBase: []string{"ep-0"}},
		{name: "one stale candidate falls back despite a wide gap", scored: stale(eps(0, 500, 900), 2, now.Add(-time.Second)), wantReason: ReasonStaleFallback, wantBase: []string{"ep-0", "ep-1", "ep-2"}},
		{name: "never scraped is stale", scored: stale(eps(0, 500), 0, time.Time{}), wantReason: ReasonStaleFallback, wantBase: []string{"ep-0", "ep-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			pk, base := setup(t, reg, logr.Discard(), nil)
			// An explained request (/debug/decisions) gets the reason.
			var req *scheduling.Request
			if !tt.nilRequest {
				req = &scheduling.Request{ID: "r"}
				scheduling.Explain(req, scheduling.ExplainLimits{})
			}
			res := pk.Pick(t.Context(), req, tt.scored)
			if req != nil {
				if why, _ := scheduling.PickReasonKey.Get(req); why != tt.wantReason {
					t.Errorf("PickReasonKey = %q, want %q", why, tt.wantReason)
				}
			}
			if len(res.Targets) != 1 {
				t.Fatalf("targets = %v", schedulingtest.Names(res.Targets))
			}
			got := res.Targets[0].Name()
			if tt.wantEndpoint != "" {
				if got != tt.wantEndpoint || len(base.calls) != 0 {
					t.Errorf("picked %s (base called %v), want %s by engine load", got, base.calls, tt.wantEndpoint)
				}
			} else if len(base.calls) != 1 || !slices.Equal(sorted(base.calls[0]), tt.wantBase) {
				t.Errorf("base calls = %v, want one over %v", base.calls, tt.wantBase)
			}
			if v := counter(t, reg, map[string]string{"picker": "el", "backend": got, "reason": tt.wantReason}); v != 1 {
				t.Errorf("%s{backend=%q,reason=%q} = %v, want 1", DecisionsMetric, got, tt.wantReason, v)
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestC20_TiesByKVThenBase: equal lowest queues are told apart by KV
// usage; those equal in both go to the base strategy, which rotates among
// them only.
func TestC20_TiesByKVThenBase(t *testing.T) {
	build := func(spec ...struct {
		w  int
		kv float64
	}) []scheduling.ScoredEndpoint {
		out := make([]scheduling.ScoredEndpoint, len(spec))
		for i, s := range spec {
			out[i] = scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint(fmt.Sprintf("ep-%d", i)).Queue(s.w).KVCache(s.kv).UpdateTime(now).Build()}
		}
		return out
	}
	type wk = struct {
		w  int
		kv float64
	}
	pk, base := setup(t, prometheus.NewRegistry(), logr.Discard(), nil)
	s := build(wk{200, 0.1}, wk{10, 0.9}, wk{10, 0.4}, wk{100, 0})
	if got := pk.Pick(t.Context(), nil, s).Targets[0].Name(); got != "ep-2" || len(base.calls) != 0 {
		t.Errorf("KV tie-break picked %s (base %v), want ep-2", got, base.calls)
	}
	s = build(wk{200, 0.1}, wk{10, 0.4}, wk{300, 0}, wk{10, 0.4})
	seen := map[string]int{}
	for range 4 {
		seen[pk.Pick(t.Context(), nil, slices.Clone(s)).Targets[0].Name()]++
	}
	if seen["ep-1"] != 2 || seen["ep-3"] != 2 {
		t.Errorf("ties rotated as %v, want ep-1 and ep-3 twice each", seen)
	}
	for _, c := range base.calls {
		if !slices.Equal(sorted(c), []string{"ep-1", "ep-3"}) {
			t.Errorf("base was given %v, want only the tied ep-1, ep-3", c)
		}
	}
	// KV out of range and NaN are clamped (NaN as 1).
	s = build(wk{10, -3}, wk{10, 0.2}, wk{200, 0})
	if got := pk.Pick(t.Context(), nil, s).Targets[0].Name(); got != "ep-0" {
		t.Errorf("negative KV clamped to 0 should win, got %s", got)
	}
	nan := build(wk{10, 0.99}, wk{200, 0})
	nan = append(nan, scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint("nan").Queue(10).KVCache(nanValue()).UpdateTime(now).Build()})
	if got := pk.Pick(t.Context(), nil, nan).Targets[0].Name(); got != "ep-0" {
		t.Errorf("NaN KV must not win, got %s", got)
	}
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}

// TestC21_FreshnessHorizon: fresh means scraped within scrapeInterval ×
// maxStalenessIntervals.
func TestC21_FreshnessHorizon(t *testing.T) {
	at := func(age time.Duration) []scheduling.ScoredEndpoint {
		return []scheduling.ScoredEndpoint{
			{Endpoint: schedulingtest.Endpoint("a").Queue(0).UpdateTime(now).Build()},
			{Endpoint: schedulingtest.Endpoint("b").Queue(500).UpdateTime(now.Add(-age)).Build()},
		}
	}
	tests := []struct {
		name   string
		mutate func(*Params)
		age    time.Duration
		want   string
	}{
		{name: "default horizon 150ms: at the horizon", age: 150 * time.Millisecond, want: ReasonEngineLoad},
		{name: "default horizon: just beyond", age: 150*time.Millisecond + time.Nanosecond, want: ReasonStaleFallback},
		{name: "scraped in the future (clock skew) is fresh", age: -time.Second, want: ReasonEngineLoad},
		{name: "1s × 2 intervals: 2s fresh", mutate: func(p *Params) { p.ScrapeInterval.Duration = time.Second; p.MaxStalenessIntervals = 2 }, age: 2 * time.Second, want: ReasonEngineLoad},
		{name: "1s × 2 intervals: 2.1s stale", mutate: func(p *Params) { p.ScrapeInterval.Duration = time.Second; p.MaxStalenessIntervals = 2 }, age: 2100 * time.Millisecond, want: ReasonStaleFallback},
		{name: "one interval", mutate: func(p *Params) { p.MaxStalenessIntervals = 1 }, age: 60 * time.Millisecond, want: ReasonStaleFallback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			pk, _ := setup(t, reg, logr.Discard(), tt.mutate)
			res := pk.Pick(t.Context(), nil, at(tt.age))
			if v := counter(t, reg, map[string]string{"picker": "el", "backend": res.Targets[0].Name(), "reason": tt.want}); v != 1 {
				t.Errorf("no %s decision for %s", tt.want, res.Targets[0].Name())
			}
		})
	}
	if !Fresh(now, now, 0) || Fresh(time.Time{}, now, time.Hour) {
		t.Error("Fresh: scraped now is fresh with a zero horizon; never scraped is never fresh")
	}
}

// TestPickFallbacks: with maxNumOfEndpoints 3, engine load orders the
// rest by queue then KV; the base's result is completed in candidate
// order when it returns fewer, and cut when it returns more.
func TestPickFallbacks(t *testing.T) {
	pk, base := setup(t, prometheus.NewRegistry(), logr.Discard(), func(p *Params) { p.MaxNumOfEndpoints = 3 })
	res := pk.Pick(t.Context(), nil, eps(300, 100, 500, 200))
	if got := schedulingtest.Names(res.Targets); !slices.Equal(got, []string{"ep-1", "ep-3", "ep-0"}) {
		t.Errorf("engine-load targets = %v, want ep-1, ep-3, ep-0", got)
	}
	// Two tied at the lowest queue: the base orders them, the rest follow.
	res = pk.Pick(t.Context(), nil, eps(300, 100, 100, 500))
	if got := schedulingtest.Names(res.Targets); len(got) != 3 || got[2] != "ep-0" || !slices.Equal(sorted(got[:2]), []string{"ep-1", "ep-2"}) {
		t.Errorf("tied targets = %v", got)
	}
	base.max = 1 // a base returning fewer
	res = pk.Pick(t.Context(), nil, eps(1, 2, 3, 4))
	if got := res.Targets; len(got) != 3 || got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		t.Errorf("held targets = %v", schedulingtest.Names(got))
	}
	base.max = 5 // a base returning more
	if got := pk.Pick(t.Context(), nil, eps(1, 2, 3, 4)).Targets; len(got) != 3 {
		t.Errorf("held targets = %v, want 3", schedulingtest.Names(got))
	}
	if got := pk.Pick(t.Context(), nil, nil); len(got.Targets) != 0 {
		t.Error("no candidates must give no targets")
	}
	pk1, b1 := setup(t, prometheus.NewRegistry(), logr.Discard(), nil)
	b1.max = 0
	empty := &emptyBase{}
	pk1.base, pk1.pbase = empty, nil
	if got := pk1.Pick(t.Context(), nil, eps(1, 2)); len(got.Targets) != 1 {
		t.Errorf("a base returning nothing: %v", got.Targets)
	}
}

type emptyBase struct{}

func (emptyBase) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "round-robin-picker"}
}

func (emptyBase) Pick(context.Context, *scheduling.Request, []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return nil
}

// TestStaleTransitionsLogged: the switch to stale metrics and back is
// logged once each, not per pick.
func TestStaleTransitionsLogged(t *testing.T) {
	var lines []string
	var mu sync.Mutex
	log := funcr.New(func(_, args string) { mu.Lock(); lines = append(lines, args); mu.Unlock() }, funcr.Options{Verbosity: 1})
	pk, _ := setup(t, prometheus.NewRegistry(), log, nil)
	mu.Lock()
	lines = nil
	mu.Unlock()
	staleSet := []scheduling.ScoredEndpoint{{Endpoint: schedulingtest.Endpoint("a").Build()}} // never scraped at now
	for range 5 {
		pk.Pick(t.Context(), nil, staleSet)
	}
	for range 5 {
		pk.Pick(t.Context(), nil, eps(1, 2))
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "stale") || !strings.Contains(lines[1], "fresh again") {
		t.Errorf("log lines = %q, want one for stale and one for fresh again", lines)
	}
}

func TestCloseDeletesSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	pk, _ := setup(t, reg, logr.Discard(), nil)
	pk.Pick(t.Context(), nil, eps(0, 100))
	pk.Pick(t.Context(), nil, eps(0, 1))
	pk.Close(scheduling.CloseInfo{Successor: true})
	if n := seriesCount(t, reg); n != 2 {
		t.Errorf("after a close with successor: %d series, want 2", n)
	}
	pk.Close(scheduling.CloseInfo{})
	if n := seriesCount(t, reg); n != 0 {
		t.Errorf("after the instance was dropped: %d series", n)
	}
	pk.Pick(t.Context(), nil, eps(0, 100))
	if n := seriesCount(t, reg); n != 0 {
		t.Error("a closed instance must not update series")
	}
	// A second instance on the registry shares the vector.
	setup(t, reg, logr.Discard(), nil)
	if got := Reasons(); !slices.Equal(got, []string{"strategy_engine_load", "strategy_stale_fallback", "strategy_hysteresis_hold"}) {
		t.Errorf("Reasons() = %v", got)
	}
}

func TestPickConcurrent(t *testing.T) {
	pk, _ := setup(t, prometheus.NewRegistry(), logr.Discard(), func(p *Params) { p.MaxNumOfEndpoints = 2 })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if res := pk.Pick(t.Context(), nil, eps(i%100, g*30, 70)); len(res.Targets) != 2 {
					t.Errorf("targets = %d", len(res.Targets))
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Duration{Duration: 1500 * time.Millisecond})
	if err != nil || string(b) != `"1.5s"` {
		t.Errorf("Marshal = %s, %v", b, err)
	}
	var d Duration
	if err := d.UnmarshalJSON([]byte("null")); err != nil || d.Duration != 0 {
		t.Errorf("null: %v %v", d, err)
	}
	for _, raw := range []string{"{}", "[]", "true"} {
		if err := d.UnmarshalJSON([]byte(raw)); err == nil {
			t.Errorf("%s accepted", raw)
		}
	}
}

func counter(t *testing.T, g prometheus.Gatherer, labels map[string]string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != DecisionsMetric {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func seriesCount(t *testing.T, g prometheus.Gatherer) int {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if f.GetName() == DecisionsMetric {
			n += len(f.GetMetric())
		}
	}
	return n
}

// TestFallbacksOnlyNotAPick: a call that only orders the fallbacks (the
// strategy-picker's scorers chose the primary) counts no decision, for
// each of the three reasons, and passes FallbacksOnly on to the base.
func TestFallbacksOnlyNotAPick(t *testing.T) {
	for _, tt := range []struct {
		name   string
		scored []scheduling.ScoredEndpoint
		reason string
	}{
		{name: "hold", scored: eps(0, 1, 2), reason: ReasonHysteresisHold},
		{name: "engine load", scored: eps(500, 0, 300), reason: ReasonEngineLoad},
		{name: "stale", scored: append(eps(0, 500), scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint("ep-2").Queue(3).Build()}), reason: ReasonStaleFallback},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			pk, _ := setup(t, reg, logr.Discard(), func(p *Params) { p.MaxNumOfEndpoints = 2 })
			fb := scheduling.PickInfo{FallbacksOnly: true}
			for range 3 {
				if res := pk.PickInProfile(t.Context(), nil, slices.Clone(tt.scored), fb); len(res.Targets) != 2 {
					t.Fatalf("fallbacks-only call ordered %v, want 2 targets", schedulingtest.Names(res.Targets))
				}
			}
			if n := total(t, reg); n != 0 {
				t.Errorf("%s after fallbacks-only calls = %v, want 0", DecisionsMetric, n)
			}
			res := pk.PickInProfile(t.Context(), nil, slices.Clone(tt.scored), scheduling.PickInfo{})
			if v := counter(t, reg, map[string]string{"picker": "el", "backend": res.Targets[0].Name(), "reason": tt.reason}); v != 1 {
				t.Errorf("%s{reason=%q} after a pick = %v, want 1", DecisionsMetric, tt.reason, v)
			}
		})
	}
	// The base is told as well.
	h := schedulingtest.NewHandle(t)
	pb := &fakeProfileBase{fakeBase{name: scheduling.TypedName{Type: "round-robin-picker", Name: "el/base"}}}
	h.AddPlugin("el/base", pb)
	pk, err := New("el", DefaultParams(), h)
	if err != nil {
		t.Fatal(err)
	}
	pk.now = func() time.Time { return now }
	pk.PickInProfile(t.Context(), nil, eps(1, 2), scheduling.PickInfo{FallbacksOnly: true})
	if len(pb.infos) != 1 || !pb.infos[0].FallbacksOnly {
		t.Errorf("base infos = %+v, want one with FallbacksOnly", pb.infos)
	}
}

// total sums every series of the decisions counter.
func total(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == DecisionsMetric {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
