package scheduling_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// reasonPicker is maxPicker that records who decided and why, as the
// strategy picker does.
type reasonPicker struct{ maxPicker }

func (p reasonPicker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	scheduling.DecidedByKey.Set(req, scheduling.DecidedByStrategy)
	scheduling.PickReasonKey.Set(req, "round_robin")
	// Reorder scored, as a picker may: the explanation must not follow.
	for i, j := 0, len(scored)-1; i < j; i, j = i+1, j-1 {
		scored[i], scored[j] = scored[j], scored[i]
	}
	return p.maxPicker.Pick(ctx, req, scored)
}

func TestExplainProfileRun(t *testing.T) {
	eps := schedulingtest.Endpoints(5, nil) // ep-0 … ep-4
	names := schedulingtest.Names(eps)
	keepNot := func(name string) *schedulingtest.FakeFilter {
		return &schedulingtest.FakeFilter{Name: "not-" + name, Keep: func(e *scheduling.Endpoint) bool { return e.Name() != name }}
	}
	a := &schedulingtest.FakeScorer{Name: "a", Scores: map[string]float64{names[0]: 0.9, names[1]: 0.2, names[2]: 0.5, names[3]: 2, names[4]: math.NaN()}}
	b := &schedulingtest.FakeScorer{Name: "b", Scores: map[string]float64{names[0]: 0.1, names[1]: 1, names[2]: 0.5, names[3]: 0, names[4]: 0.3}}
	scorers := []scheduling.WeightedScorer{{Scorer: a, Weight: 2}, {Scorer: b, Weight: 1}}

	for _, tt := range []struct {
		name    string
		filters []scheduling.Filter
		picker  scheduling.Picker
		max     int
		want    scheduling.ProfileRun
	}{{
		name:    "all listed, max picker",
		filters: []scheduling.Filter{keepNot(names[1])},
		picker:  maxPicker{name: "max"},
		max:     10,
		want: scheduling.ProfileRun{
			Profile: "p", TargetModel: "m", Candidates: 5, Picker: "max",
			Filters: []scheduling.FilterStep{{Filter: "not-" + names[1], Kept: 4, Endpoints: []string{names[0], names[2], names[3], names[4]}}},
			Scorers: []scheduling.ScorerInfo{{Scorer: "a", Weight: 2}, {Scorer: "b", Weight: 1}},
			Endpoints: []scheduling.EndpointScores{
				{Name: names[3], Address: eps[3].HostPort(), Total: 2, Scores: []scheduling.ScorePair{{Raw: 2, Weighted: 2}, {Raw: 0, Weighted: 0}}},
				{Name: names[0], Address: eps[0].HostPort(), Total: 1.9, Scores: []scheduling.ScorePair{{Raw: 0.9, Weighted: 1.8}, {Raw: 0.1, Weighted: 0.1}}},
				{Name: names[2], Address: eps[2].HostPort(), Total: 1.5, Scores: []scheduling.ScorePair{{Raw: 0.5, Weighted: 1}, {Raw: 0.5, Weighted: 0.5}}},
				{Name: names[4], Address: eps[4].HostPort(), Total: 0.3, Scores: []scheduling.ScorePair{{Raw: scheduling.Score(math.NaN()), Weighted: 0}, {Raw: 0.3, Weighted: 0.3}}},
			},
			Targets: []string{names[3]},
		},
	}, {
		name:   "capped lists, the chosen endpoint kept, reasons recorded",
		picker: reasonPicker{maxPicker{name: "why"}},
		max:    2,
		want: scheduling.ProfileRun{
			Profile: "p", TargetModel: "m", Candidates: 5, Picker: "why",
			Scorers: []scheduling.ScorerInfo{{Scorer: "a", Weight: 2}, {Scorer: "b", Weight: 1}},
			Endpoints: []scheduling.EndpointScores{
				{Name: names[3], Address: eps[3].HostPort(), Total: 2, Scores: []scheduling.ScorePair{{Raw: 2, Weighted: 2}, {Raw: 0, Weighted: 0}}},
				{Name: names[0], Address: eps[0].HostPort(), Total: 1.9, Scores: []scheduling.ScorePair{{Raw: 0.9, Weighted: 1.8}, {Raw: 0.1, Weighted: 0.1}}},
			},
			Truncated: 3,
			Targets:   []string{names[3]},
			DecidedBy: "strategy",
			Reason:    "round_robin",
		},
	}, {
		name:    "filter list capped",
		filters: []scheduling.Filter{keepNot("none")},
		picker:  maxPicker{name: "max"},
		max:     1,
		want: scheduling.ProfileRun{
			Profile: "p", TargetModel: "m", Candidates: 5, Picker: "max",
			Filters: []scheduling.FilterStep{{Filter: "not-none", Kept: 5, Endpoints: []string{names[0]}, Truncated: 4}},
			Scorers: []scheduling.ScorerInfo{{Scorer: "a", Weight: 2}, {Scorer: "b", Weight: 1}},
			Endpoints: []scheduling.EndpointScores{
				{Name: names[3], Address: eps[3].HostPort(), Total: 2, Scores: []scheduling.ScorePair{{Raw: 2, Weighted: 2}, {Raw: 0, Weighted: 0}}},
			},
			Truncated: 4,
			Targets:   []string{names[3]},
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := scheduling.NewProfile("p", tt.filters, scorers, tt.picker, nil)
			require.NoError(t, err)
			req := &scheduling.Request{ID: "r", TargetModel: "m"}
			x := scheduling.Explain(req, scheduling.ExplainLimits{MaxEndpoints: tt.max})
			_, err = p.Run(t.Context(), req, append([]*scheduling.Endpoint(nil), eps...))
			require.NoError(t, err)
			require.Len(t, x.Runs, 1)
			nanEq := cmp.Comparer(func(a, b scheduling.Score) bool {
				return a == b || (math.IsNaN(float64(a)) && math.IsNaN(float64(b)))
			})
			if diff := cmp.Diff(tt.want, x.Runs[0], nanEq, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); diff != "" {
				t.Errorf("Run mismatch (-want +got):\n%s", diff)
			}
			if run := x.Primary("p"); run == nil || run.Targets[0] != tt.want.Targets[0] {
				t.Errorf("Primary(p) = %v, want the run", run)
			}
			_, err = json.Marshal(x.Runs) // NaN raw scores must encode
			require.NoError(t, err)
		})
	}
}

func TestExplainFailedRunAndBound(t *testing.T) {
	eps := schedulingtest.Endpoints(3, nil)
	none := &schedulingtest.FakeFilter{Name: "none", Keep: func(*scheduling.Endpoint) bool { return false }}
	p, err := scheduling.NewProfile("p", []scheduling.Filter{none}, nil, maxPicker{name: "max"}, nil)
	require.NoError(t, err)
	req := &scheduling.Request{ID: "r"}
	x := scheduling.Explain(req, scheduling.ExplainLimits{})
	for range scheduling.MaxExplainRuns + 3 {
		_, err = p.Run(t.Context(), req, eps)
		require.ErrorIs(t, err, scheduling.ErrNoEndpoints)
	}
	require.Len(t, x.Runs, scheduling.MaxExplainRuns)
	require.Equal(t, 3, x.DroppedRuns)
	require.Contains(t, x.Runs[0].Error, "left no endpoints")
	require.Equal(t, []scheduling.FilterStep{{Filter: "none", Kept: 0, Endpoints: []string{}}}, x.Runs[0].Filters)
	require.Nil(t, x.Primary("p"))

	// A fallback attempt shares the first request's explanation.
	next := &scheduling.Request{ID: "r"}
	scheduling.ShareExplanation(next, req)
	_, _ = p.Run(t.Context(), next, eps)
	require.Equal(t, 4, x.DroppedRuns)
}

func TestScoreJSON(t *testing.T) {
	b, err := json.Marshal([]scheduling.Score{0.5, scheduling.Score(math.NaN()), scheduling.Score(math.Inf(1)), scheduling.Score(math.Inf(-1))})
	require.NoError(t, err)
	require.Equal(t, `[0.5,"NaN","+Inf","-Inf"]`, string(b))
	require.False(t, strings.Contains(string(b), "null"))
}

// BenchmarkExplain is BenchmarkProfileRun at 1000 endpoints with and
// without an Explanation: "off" must match BenchmarkProfileRun (no
// allocation, a nil check per step), "on" shows what recording costs.
func BenchmarkExplain(b *testing.B) {
	p := benchProfile(b, nil)
	eps := benchEndpoints(1000)
	b.Run("off", func(b *testing.B) { runProfileBench(b, p, eps) })
	b.Run("on", func(b *testing.B) {
		ctx := b.Context()
		b.ReportAllocs()
		for b.Loop() {
			req := &scheduling.Request{ID: "bench"}
			scheduling.Explain(req, scheduling.ExplainLimits{})
			if _, err := p.Run(ctx, req, eps); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// With AllScores, RunScores has every scored endpoint of a run, uncapped,
// while the run itself stays capped; without it, nothing.
func TestExplainRunScores(t *testing.T) {
	eps := schedulingtest.Endpoints(12, nil)
	scores := map[string]float64{}
	for i, e := range eps {
		scores[e.Name()] = float64(i) / 12
	}
	s := &schedulingtest.FakeScorer{Name: "s", Scores: scores}
	p, err := scheduling.NewProfile("p", nil, []scheduling.WeightedScorer{{Scorer: s, Weight: 2}}, maxPicker{name: "max"}, nil)
	require.NoError(t, err)
	for _, tt := range []struct {
		name string
		all  bool
		want int
	}{{"all scores", true, 12}, {"capped only", false, 0}} {
		t.Run(tt.name, func(t *testing.T) {
			req := &scheduling.Request{ID: "r", TargetModel: "m"}
			x := scheduling.Explain(req, scheduling.ExplainLimits{MaxEndpoints: 3, AllScores: tt.all})
			_, err := p.Run(t.Context(), req, eps)
			require.NoError(t, err)
			run := x.Primary("p")
			require.NotNil(t, run)
			require.Len(t, run.Endpoints, 3)
			got := x.RunScores(run)
			require.Len(t, got, tt.want)
			for i, e := range got {
				require.Equal(t, eps[i].HostPort(), e.Address)
				require.InDelta(t, 2*float64(i)/12, e.Total, 1e-9)
			}
			require.Nil(t, x.RunScores(nil))
		})
	}
}
