package strategy

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

// fakeStrategy stands in for a strategy's picker: it walks the candidates
// in rotation, as round-robin-picker does, and records what it was given.
type fakeStrategy struct {
	typ, name string
	max       int
	turn      pick.Rotation
	mu        sync.Mutex
	calls     int
	lastInfo  *scheduling.PickInfo
	reason    string // set as scheduling.PickReasonKey when not empty
}

func (f *fakeStrategy) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: f.typ, Name: f.name}
}

func (f *fakeStrategy) Pick(_ context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.reason != "" && scheduling.Explaining(req) {
		scheduling.PickReasonKey.Set(req, f.reason)
	}
	return pick.Rotated(scored, f.turn.Next(), f.max)
}

// fakeProfileStrategy is a strategy that wants the profile's information.
type fakeProfileStrategy struct{ fakeStrategy }

func (f *fakeProfileStrategy) PickInProfile(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	f.mu.Lock()
	f.lastInfo = &info
	f.mu.Unlock()
	return f.Pick(ctx, req, scored)
}

// handleWith returns a handle holding a fake strategy instance for the
// strategy-picker named parent, as the loader would build it.
func handleWith(t testing.TB, parent, pluginType string, max int) (*scheduling.BasicHandle, *fakeStrategy) {
	t.Helper()
	h := schedulingtest.NewHandle(t)
	f := &fakeStrategy{typ: pluginType, name: strategies.StrategyInstance(parent), max: max}
	h.AddPlugin(f.name, f)
	return h, f
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name     string
		params   string
		wantErrs []string
	}{
		{name: "defaults", params: `{}`},
		{name: "every strategy spelling", params: `{"strategy": "least_busy"}`},
		{name: "parameters", params: `{"strategy": "ConsistentHash", "strategyParameters": {"virtualNodes": 10}, "scorerThreshold": 0}`},
		{name: "null parameters", params: `{"strategyParameters": null, "scorerThreshold": 1}`},
		{name: "unknown strategy", params: `{"strategy": "bogus"}`, wantErrs: []string{`strategy: unknown strategy "bogus"; valid: RoundRobin, WeightedRoundRobin, LeastLatency, Random, ConsistentHash, PrefixAwareHash, EngineLoad, LeastBusy, LeastCost`}},
		{name: "empty strategy", params: `{"strategy": ""}`, wantErrs: []string{`strategy: unknown strategy ""`}},
		{name: "parameters not an object", params: `{"strategyParameters": [1]}`, wantErrs: []string{"strategyParameters: expected an object"}},
		{name: "parameters a string", params: `{"strategyParameters": "x"}`, wantErrs: []string{"strategyParameters: expected an object"}},
		{name: "nested maxNumOfEndpoints", params: `{"strategyParameters": {"maxNumOfEndpoints": 2}}`, wantErrs: []string{"strategyParameters: maxNumOfEndpoints: not allowed here; set maxNumOfEndpoints on the plugin itself"}},
		{name: "threshold above 1", params: `{"scorerThreshold": 1.5}`, wantErrs: []string{"scorerThreshold: must be a fraction in 0..1 of the profile's total scorer weight, got 1.5"}},
		{name: "negative threshold", params: `{"scorerThreshold": -0.1}`, wantErrs: []string{"scorerThreshold: must be a fraction in 0..1"}},
		{name: "margin above 1", params: `{"scorerMargin": 1.5}`, wantErrs: []string{"scorerMargin: must be a fraction in 0..1 of the profile's total scorer weight, got 1.5"}},
		{name: "negative margin", params: `{"scorerMargin": -0.01}`, wantErrs: []string{"scorerMargin: must be a fraction in 0..1"}},
		{name: "margin bounds", params: `{"scorerMargin": 0}`},
		{name: "margin one", params: `{"scorerMargin": 1}`},
		{name: "every problem at once", params: `{"strategy": "x", "strategyParameters": 3, "scorerThreshold": 2, "maxNumOfEndpoints": 0}`, wantErrs: []string{
			"maxNumOfEndpoints: must be >= 1, got 0", `strategy: unknown strategy "x"`, "strategyParameters: expected an object", "scorerThreshold: must be a fraction"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			if err := scheduling.DecodeParams(json.RawMessage(tt.params), &p); err != nil {
				t.Fatal(err)
			}
			err := p.Validate()
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if got := len(scheduling.Errors(err)); got != len(tt.wantErrs) {
				t.Errorf("Validate reported %d problems (%v), want %d", got, err, len(tt.wantErrs))
			}
			for _, w := range tt.wantErrs {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error %v does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFactory(t *testing.T) {
	h, _ := handleWith(t, "p", "least-busy-picker", 2)
	got, err := Registration.Factory("p", json.RawMessage(`{"strategy": "least-busy", "maxNumOfEndpoints": 2}`), h)
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*Picker)
	if p.Strategy() != strategies.LeastBusy || p.Max != 2 || p.StrategyPicker().TypedName().Name != "p/strategy" {
		t.Errorf("picker = %s, max %d, strategy instance %v", p.Strategy(), p.Max, p.StrategyPicker().TypedName())
	}
	eff, _ := h.Params("p")
	if want := (Params{Params: pick.Params{MaxNumOfEndpoints: 2}, Strategy: "LeastBusy", ScorerThreshold: 0.3}); eff.(Params).Strategy != want.Strategy || eff.(Params).ScorerThreshold != want.ScorerThreshold {
		t.Errorf("effective parameters = %+v, want the canonical strategy name and the default threshold and margin", eff)
	}

	// Decoding errors are the factory's, like every plugin's.
	schedulingtest.RunFactoryCases(t, Registration, append(schedulingtest.DecodeErrorCases(),
		schedulingtest.FactoryCase{Name: "invalid", Params: `{"strategy": "nope"}`, WantErr: `strategy: unknown strategy "nope"`},
		schedulingtest.FactoryCase{Name: "no strategy instance", Params: `{}`, WantErr: `strategy: no round-robin-picker instance "under-test/strategy": the configuration loader builds it`},
	))

	// The strategy instance must be of the strategy's type and a picker.
	h, _ = handleWith(t, "p", "random-picker", 1)
	if _, err := New("p", DefaultParams(), h); err == nil || !strings.Contains(err.Error(), `strategy: instance "p/strategy" is a random-picker, want a round-robin-picker for RoundRobin`) {
		t.Errorf("wrong type: %v", err)
	}
	h = schedulingtest.NewHandle(t)
	h.AddPlugin("p/strategy", &schedulingtest.FakeFilter{Name: "p/strategy"})
	params := DefaultParams()
	params.Strategy = "fake"
	if _, err := New("p", params, h); err == nil {
		t.Error("New accepted an unknown strategy")
	}
	if _, err := New("p", DefaultParams(), nil); err == nil {
		t.Error("New accepted a nil handle")
	}
}

func newPicker(t testing.TB, params Params, reg prometheus.Registerer) (*Picker, *fakeStrategy) {
	t.Helper()
	_, typ, err := strategies.Parse(params.Strategy)
	if err != nil {
		t.Fatal(err)
	}
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Seed: 1})
	f := &fakeStrategy{typ: typ, name: "p/strategy", max: params.MaxNumOfEndpoints}
	h.AddPlugin(f.name, f)
	p, err := New("p", params, h)
	if err != nil {
		t.Fatal(err)
	}
	return p, f
}

func names(res *scheduling.ProfileResult) string {
	return strings.Join(schedulingtest.Names(res.Targets), ",")
}

// TestC02_ScorersDecideElseStrategy: the profile's scorers run before the
// strategy; when one endpoint's weighted score is strictly the highest and
// reaches scorerThreshold × the profile's total weight, it is taken and
// the strategy is skipped; otherwise (a tie at the top, a top below the
// threshold, no scorers) the strategy chooses among all the candidates.
// Each decision is counted by what made it.
func TestC02_ScorersDecideElseStrategy(t *testing.T) {
	const total = 7.0 // the default profile's weights: 2 + 2 + 3
	tests := []struct {
		name        string
		scores      []float64
		totalWeight float64
		threshold   float64
		margin      float64
		want        string // the primary, or "strategy" when the strategy decides
	}{
		{name: "clear winner", scores: []float64{1, 5.5, 2}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "ep-1"},
		{name: "at the threshold", scores: []float64{2.1, 1, 0}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "ep-0"},
		{name: "below the threshold", scores: []float64{2, 1, 0}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "strategy"},
		{name: "tie at the top", scores: []float64{6, 6, 1}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "strategy"},
		{name: "tie at the top, margin zero", scores: []float64{6, 6, 1}, totalWeight: total, threshold: 0.3, margin: 0, want: "strategy"},
		{name: "all equal", scores: []float64{7, 7, 7}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "strategy"},
		{name: "tie below the top does not matter", scores: []float64{1, 1, 6}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "ep-2"},
		{name: "no scorers", scores: []float64{0, 0, 0}, totalWeight: 0, threshold: 0.3, margin: 0.05, want: "strategy"},
		{name: "threshold zero, margin zero: any strict winner", scores: []float64{0, 0.01, 0}, totalWeight: total, threshold: 0, margin: 0, want: "ep-1"},
		{name: "threshold one: only a perfect score", scores: []float64{6.9, 1, 0}, totalWeight: total, threshold: 1, margin: 0.05, want: "strategy"},
		{name: "threshold one, perfect", scores: []float64{7, 1, 0}, totalWeight: total, threshold: 1, margin: 0.05, want: "ep-0"},
		{name: "one candidate above", scores: []float64{3}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "ep-0"},
		{name: "one candidate below", scores: []float64{2}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "strategy"},
		// The margin: the top must beat the runner-up by margin × total
		// weight (0.35 here), not by float noise.
		{name: "float-noise lead", scores: []float64{5, 5 + 1e-9, 1}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "strategy"},
		{name: "float-noise lead, margin zero", scores: []float64{5, 5 + 1e-9, 1}, totalWeight: total, threshold: 0.3, margin: 0, want: "ep-1"},
		{name: "lead just under the margin", scores: []float64{5, 5.34, 1}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "strategy"},
		{name: "lead at the margin", scores: []float64{5, 5.375, 1}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "ep-1"},
		{name: "runner-up after the top", scores: []float64{5.5, 1, 5.4}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "strategy"},
		{name: "runner-up before the top", scores: []float64{5.4, 1, 5.5}, totalWeight: total, threshold: 0.3, margin: 0.05, want: "strategy"},
		{name: "margin one: only perfect over zero", scores: []float64{7, 0, 0}, totalWeight: total, threshold: 0, margin: 1, want: "ep-0"},
		{name: "margin one, runner-up above zero", scores: []float64{7, 0.5, 0}, totalWeight: total, threshold: 0, margin: 1, want: "strategy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := DefaultParams()
			params.ScorerThreshold = tt.threshold
			params.ScorerMargin = tt.margin
			reg := prometheus.NewRegistry()
			p, f := newPicker(t, params, reg)
			req := &scheduling.Request{ID: "r"}
			res := p.PickInProfile(t.Context(), req, schedulingtest.Scored(tt.scores...), scheduling.PickInfo{TotalWeight: tt.totalWeight, Scorers: 3})
			byScorers := value(t, p.byScorers)
			byStrategy := value(t, p.byStrat)
			// The request records who decided (DecidedByKey), for terms
			// that count only the passes they decided (C-38).
			wantBy := scheduling.DecidedByScorers
			if tt.want == "strategy" {
				wantBy = scheduling.DecidedByStrategy
			}
			if by, ok := scheduling.DecidedByKey.Get(req); !ok || by != wantBy {
				t.Errorf("DecidedByKey = %v, %v; want %v", by, ok, wantBy)
			}
			if tt.want == "strategy" {
				if f.calls != 1 || names(res) != "ep-0" || byStrategy != 1 || byScorers != 0 {
					t.Errorf("got %s (strategy calls %d, counted scorers %v strategy %v), want the strategy's first turn, ep-0", names(res), f.calls, byScorers, byStrategy)
				}
				return
			}
			if names(res) != tt.want || f.calls != 0 || byScorers != 1 || byStrategy != 0 {
				t.Errorf("got %s (strategy calls %d, counted scorers %v strategy %v), want %s from the scorers", names(res), f.calls, byScorers, byStrategy, tt.want)
			}
		})
	}

	t.Run("through a profile", func(t *testing.T) {
		// A profile gives the picker its total weight: a scorer of weight 4
		// whose best endpoint scores 0.5 (2 ≥ 0.3 × 4) decides.
		p, f := newPicker(t, DefaultParams(), prometheus.NewRegistry())
		scorer := &schedulingtest.FakeScorer{Name: "s", Scores: map[string]float64{"ep-2": 0.5, "ep-1": 0.2}}
		prof, err := scheduling.NewProfile("default", nil, []scheduling.WeightedScorer{{Scorer: scorer, Weight: 4}}, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		eps := schedulingtest.Endpoints(3, nil)
		for range 5 {
			res, err := prof.Run(t.Context(), &scheduling.Request{}, eps)
			if err != nil || names(res) != "ep-2" {
				t.Fatalf("got %v, %v; want ep-2 from the scorers", res, err)
			}
		}
		// Below the threshold the strategy takes turns over every candidate.
		scorer.Scores = map[string]float64{"ep-2": 0.2}
		var got []string
		for range 3 {
			res, _ := prof.Run(t.Context(), &scheduling.Request{}, eps)
			got = append(got, names(res))
		}
		if strings.Join(got, " ") != "ep-0 ep-1 ep-2" || f.calls != 3 {
			t.Errorf("strategy picks = %v (%d calls), want a walk over all three", got, f.calls)
		}
	})
}

// Fallbacks follow the primary in the strategy's order, without the
// primary twice.
func TestFallbacks(t *testing.T) {
	params := DefaultParams()
	params.MaxNumOfEndpoints = 3
	p, f := newPicker(t, params, prometheus.NewRegistry())
	info := scheduling.PickInfo{TotalWeight: 1}
	// Scorers choose ep-1; the strategy's first turn is ep-0, ep-1, ep-2.
	if got := names(p.PickInProfile(t.Context(), nil, schedulingtest.Scored(0, 0.9, 0, 0), info)); got != "ep-1,ep-0,ep-2" {
		t.Errorf("scorers decided: %s, want ep-1 then the strategy's order without it", got)
	}
	// Next turn starts at ep-1: ep-1, ep-2, ep-3 → after the primary ep-1.
	if got := names(p.PickInProfile(t.Context(), nil, schedulingtest.Scored(0, 0.9, 0, 0), info)); got != "ep-1,ep-2,ep-3" {
		t.Errorf("scorers decided: %s", got)
	}
	// The strategy decides: its order as is.
	if got := names(p.PickInProfile(t.Context(), nil, schedulingtest.Scored(0, 0, 0, 0), info)); got != "ep-2,ep-3,ep-0" {
		t.Errorf("strategy decided: %s", got)
	}
	// Fewer candidates than maxNumOfEndpoints.
	if got := names(p.PickInProfile(t.Context(), nil, schedulingtest.Scored(0.8, 0.1), info)); got != "ep-0,ep-1" {
		t.Errorf("two candidates: %s", got)
	}
	if f.calls != 4 {
		t.Errorf("strategy calls = %d, want 4 (it orders the fallbacks)", f.calls)
	}
	if res := p.PickInProfile(t.Context(), nil, nil, info); len(res.Targets) != 0 {
		t.Errorf("no candidates: %v", res.Targets)
	}
	// Pick without a profile: the strategy decides.
	if got := names(p.Pick(t.Context(), nil, schedulingtest.Scored(0, 0.9, 0))); got != "ep-1,ep-2,ep-0" { // turn 4 of 3
		t.Errorf("Pick: %s", got)
	}
}

// A strategy that is a ProfilePicker is called with the profile's
// information.
func TestProfilePickerStrategy(t *testing.T) {
	h := schedulingtest.NewHandle(t)
	f := &fakeProfileStrategy{fakeStrategy{typ: "engine-load-picker", name: "p/strategy", max: 1}}
	h.AddPlugin(f.name, f)
	params := DefaultParams()
	params.Strategy = "engine_load"
	p, err := New("p", params, h)
	if err != nil {
		t.Fatal(err)
	}
	info := scheduling.PickInfo{Profile: "default", TotalWeight: 2, Scorers: 1}
	p.PickInProfile(t.Context(), nil, schedulingtest.Scored(0.1, 0.1), info)
	if f.lastInfo == nil || *f.lastInfo != info {
		t.Errorf("strategy got %+v, want %+v", f.lastInfo, info)
	}
}

// When the scorers decided and maxNumOfEndpoints > 1, the strategy is
// asked only for the fallbacks' order, with FallbacksOnly, so that it does
// not record a pick; when the strategy decides, it is a pick of its own.
func TestFallbacksOnlyTellsTheStrategy(t *testing.T) {
	h := schedulingtest.NewHandle(t)
	f := &fakeProfileStrategy{fakeStrategy{typ: "round-robin-picker", name: "p/strategy", max: 3}}
	h.AddPlugin(f.name, f)
	params := DefaultParams()
	params.MaxNumOfEndpoints = 3
	p, err := New("p", params, h)
	if err != nil {
		t.Fatal(err)
	}
	info := scheduling.PickInfo{Profile: "default", TotalWeight: 1, Scorers: 1}
	// The scorers decide ep-1: the strategy orders the fallbacks only.
	if got := names(p.PickInProfile(t.Context(), nil, schedulingtest.Scored(0, 0.9, 0), info)); !strings.HasPrefix(got, "ep-1,") {
		t.Fatalf("scorers decided: %s, want ep-1 first", got)
	}
	want := info
	want.FallbacksOnly = true
	if f.lastInfo == nil || *f.lastInfo != want {
		t.Errorf("fallbacks: strategy got %+v, want %+v", f.lastInfo, want)
	}
	// The strategy decides: an ordinary pick.
	p.PickInProfile(t.Context(), nil, schedulingtest.Scored(0, 0, 0), info)
	if f.lastInfo == nil || *f.lastInfo != info {
		t.Errorf("strategy decided: strategy got %+v, want %+v", f.lastInfo, info)
	}
	// With one endpoint wanted, the scorers' pick never calls the strategy.
	params.MaxNumOfEndpoints = 1
	f.calls, f.lastInfo = 0, nil
	p1, err := New("p", params, h)
	if err != nil {
		t.Fatal(err)
	}
	p1.PickInProfile(t.Context(), nil, schedulingtest.Scored(0, 0.9, 0), info)
	if f.calls != 0 || f.lastInfo != nil {
		t.Errorf("max 1, scorers decided: strategy called %d times (%+v)", f.calls, f.lastInfo)
	}
}

// At -v 4 each pick logs which decided.
func TestDecisionLog(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 4})
	h := scheduling.NewHandle(scheduling.HandleOptions{Logger: logger, Seed: 1})
	f := &fakeStrategy{typ: "round-robin-picker", name: "p/strategy", max: 1}
	h.AddPlugin(f.name, f)
	p, err := New("p", DefaultParams(), h)
	if err != nil {
		t.Fatal(err)
	}
	info := scheduling.PickInfo{TotalWeight: 1}
	p.PickInProfile(t.Context(), &scheduling.Request{ID: "r1"}, schedulingtest.Scored(0.9, 0), info)
	p.PickInProfile(t.Context(), &scheduling.Request{ID: "r2"}, schedulingtest.Scored(0.1, 0), info)
	if len(lines) != 2 || !strings.Contains(lines[0], `"msg"="Strategy picker: the scorers decided"`) || !strings.Contains(lines[0], `"request"="r1"`) ||
		!strings.Contains(lines[1], `"msg"="Strategy picker: the strategy decided"`) || !strings.Contains(lines[1], `"strategy"="RoundRobin"`) {
		t.Errorf("log lines:\n%s", strings.Join(lines, "\n"))
	}
	// Below -v 4 nothing is logged.
	lines = nil
	h = scheduling.NewHandle(scheduling.HandleOptions{Logger: funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 3}), Seed: 1})
	h.AddPlugin(f.name, f)
	p, _ = New("p", DefaultParams(), h)
	p.PickInProfile(t.Context(), nil, schedulingtest.Scored(0.9, 0), info)
	if len(lines) != 0 {
		t.Errorf("logged at -v 3: %v", lines)
	}
}

// The decision counter is one family for every instance, labelled by
// instance; Close deletes an instance's series unless a successor serves
// under its name.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, _ := newPicker(t, DefaultParams(), reg)
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Seed: 1})
	f := &fakeStrategy{typ: "round-robin-picker", name: "q/strategy", max: 1}
	h.AddPlugin(f.name, f)
	b, err := New("q", DefaultParams(), h)
	if err != nil {
		t.Fatal(err)
	}
	info := scheduling.PickInfo{TotalWeight: 1}
	a.PickInProfile(t.Context(), nil, schedulingtest.Scored(0.9, 0), info)
	b.PickInProfile(t.Context(), nil, schedulingtest.Scored(0, 0), info)
	want := map[string]float64{"p/scorers": 1, "p/strategy": 0, "q/scorers": 0, "q/strategy": 1}
	if got := series(t, reg); len(got) != len(want) || got["p/scorers"] != 1 || got["q/strategy"] != 1 || got["p/strategy"] != 0 || got["q/scorers"] != 0 {
		t.Errorf("series = %v, want %v", got, want)
	}
	a.Close(scheduling.CloseInfo{Successor: true})
	if n := len(series(t, reg)); n != 4 {
		t.Errorf("series after a close with a successor = %d, want 4", n)
	}
	a.Close(scheduling.CloseInfo{})
	if got := series(t, reg); len(got) != 2 || got["q/strategy"] != 1 {
		t.Errorf("series after a close without one = %v, want q's 2", got)
	}
	// Picks after Close are safe.
	a.PickInProfile(t.Context(), nil, schedulingtest.Scored(0.9, 0), info)
}

func TestPickConcurrent(t *testing.T) {
	params := DefaultParams()
	params.MaxNumOfEndpoints = 2
	p, _ := newPicker(t, params, prometheus.NewRegistry())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				scores := []float64{0, 0, 0}
				if (g+i)%2 == 0 {
					scores[1] = 1
				}
				if res := p.PickInProfile(context.Background(), nil, schedulingtest.Scored(scores...), scheduling.PickInfo{TotalWeight: 1}); len(res.Targets) != 2 {
					t.Errorf("targets = %v", res.Targets)
				}
			}
		})
	}
	wg.Wait()
	if got := value(t, p.byScorers) + value(t, p.byStrat); got != 1600 {
		t.Errorf("decisions counted = %v, want 1600", got)
	}
}

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// series returns the decision counters of reg by "picker/decided_by".
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "switchyard_strategy_decisions_total" {
			continue
		}
		if !strings.HasPrefix(f.GetHelp(), "Picks of strategy-picker instances by what chose the primary endpoint") {
			t.Errorf("help = %q", f.GetHelp())
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["picker"]+"/"+labels["decided_by"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, _ := newPicker(t, DefaultParams(), reg)
	p.PickInProfile(t.Context(), nil, schedulingtest.Scored(1, 0), scheduling.PickInfo{TotalWeight: 1})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("metric %s: %s", pr.Metric, pr.Text)
	}
}

// TestC37_StrictDominance: when a term set scheduling.StrictDominanceKey,
// the endpoint with the strictly highest total decides, however small its
// lead and below any threshold; a tie at the top leaves the strategy to
// decide; the key is cleared, so the next pass without it is judged by
// threshold and margin again.
func TestC37_StrictDominance(t *testing.T) {
	const total = 7.0
	tests := []struct {
		name   string
		scores []float64
		strict bool
		want   string // endpoint, or "strategy"
	}{
		{name: "lead under the margin decides", scores: []float64{0.18, 0.16}, strict: true, want: "ep-0"},
		{name: "lead of float noise decides", scores: []float64{5, 5 + 1e-9}, strict: true, want: "ep-1"},
		{name: "below the threshold decides", scores: []float64{0.01, 0, 0}, strict: true, want: "ep-0"},
		{name: "tied top: strategy", scores: []float64{0.2, 0.2, 0.1}, strict: true, want: "strategy"},
		{name: "tied top after the leader: strategy", scores: []float64{0.1, 0.2, 0.2}, strict: true, want: "strategy"},
		{name: "lone candidate", scores: []float64{0}, strict: true, want: "ep-0"},
		{name: "without the key the margin rules", scores: []float64{0.18, 0.16}, strict: false, want: "strategy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, f := newPicker(t, DefaultParams(), prometheus.NewRegistry())
			req := &scheduling.Request{ID: "r"}
			if tt.strict {
				scheduling.StrictDominanceKey.Set(req, true)
			}
			res := p.PickInProfile(t.Context(), req, schedulingtest.Scored(tt.scores...), scheduling.PickInfo{TotalWeight: total, Scorers: 3})
			by, _ := scheduling.DecidedByKey.Get(req)
			if _, left := scheduling.StrictDominanceKey.Get(req); left {
				t.Error("StrictDominanceKey left on the request")
			}
			if tt.want == "strategy" {
				if f.calls != 1 || by != scheduling.DecidedByStrategy || names(res) != "ep-0" {
					t.Errorf("got %s decided by %v (strategy calls %d), want the strategy's first turn", names(res), by, f.calls)
				}
				return
			}
			if names(res) != tt.want || f.calls != 0 || by != scheduling.DecidedByScorers {
				t.Errorf("got %s decided by %v (strategy calls %d), want %s from the scorers", names(res), by, f.calls, tt.want)
			}
		})
	}
}

// TestC37_StrictDominanceClearedWithoutCandidates: a pass with nothing to
// pick still consumes the request's key.
func TestC37_StrictDominanceClearedWithoutCandidates(t *testing.T) {
	p, _ := newPicker(t, DefaultParams(), prometheus.NewRegistry())
	req := &scheduling.Request{}
	scheduling.StrictDominanceKey.Set(req, true)
	p.PickInProfile(t.Context(), req, nil, scheduling.PickInfo{TotalWeight: 1})
	if _, left := scheduling.StrictDominanceKey.Get(req); left {
		t.Error("StrictDominanceKey left on the request")
	}
}

// TestPickReason: for an explained request, the strategy's choice says
// why (PickReasonKey): the strategy's name and the strategy's own reason;
// a choice of the scorers leaves no reason, and an unexplained request
// gets none.
func TestPickReason(t *testing.T) {
	for _, tt := range []struct {
		name      string
		scores    []float64
		max       int
		reason    string // the fake strategy's own
		explained bool
		want      string // "" for no reason set
	}{
		{name: "strategy decides", scores: []float64{1, 1, 1}, explained: true, want: strategies.Default},
		{name: "strategy decides with its reason", scores: []float64{1, 1, 1}, reason: "hysteresis", explained: true, want: strategies.Default + "/hysteresis"},
		{name: "scorers decide", scores: []float64{0, 7, 0}, reason: "hysteresis", explained: true},
		{name: "scorers decide, strategy orders the fallbacks", scores: []float64{0, 7, 0}, max: 3, reason: "hysteresis", explained: true},
		{name: "not explained", scores: []float64{1, 1, 1}, reason: "hysteresis"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			params := DefaultParams()
			if tt.max > 0 {
				params.MaxNumOfEndpoints = tt.max
			}
			p, f := newPicker(t, params, prometheus.NewRegistry())
			f.reason = tt.reason
			req := &scheduling.Request{ID: "r"}
			if tt.explained {
				scheduling.Explain(req, scheduling.ExplainLimits{})
			}
			res := p.PickInProfile(t.Context(), req, schedulingtest.Scored(tt.scores...), scheduling.PickInfo{TotalWeight: 7, Scorers: 3})
			if len(res.Targets) == 0 {
				t.Fatal("no target")
			}
			got, ok := scheduling.PickReasonKey.Get(req)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("PickReasonKey = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}
