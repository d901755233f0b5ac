package scheduling_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// recordingFilter keeps the endpoints keep accepts and logs, into a shared
// log, the names it was given, so tests can check order and narrowing.
type recordingFilter struct {
	name string
	keep func(*scheduling.Endpoint) bool
	log  *[]string
}

func (f *recordingFilter) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "recording-filter", Name: f.name}
}

func (f *recordingFilter) Filter(_ context.Context, _ *scheduling.Request, eps []*scheduling.Endpoint) []*scheduling.Endpoint {
	*f.log = append(*f.log, f.name+" got "+strings.Join(schedulingtest.Names(eps), ","))
	var out []*scheduling.Endpoint
	for _, e := range eps {
		if f.keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// maxPicker is a stateless (so concurrency-safe) picker that chooses the
// first endpoint with the highest score.
type maxPicker struct{ name string }

func (p maxPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "max-picker", Name: p.name}
}

func (maxPicker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	if len(scored) == 0 {
		return nil
	}
	best := 0
	for i := range scored {
		if scored[i].Score > scored[best].Score {
			best = i
		}
	}
	return &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{scored[best].Endpoint}}
}

// fixedPicker returns a fixed result whatever it is given.
type fixedPicker struct{ res *scheduling.ProfileResult }

func (fixedPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fixed-picker", Name: "fixed"}
}

func (p fixedPicker) Pick(context.Context, *scheduling.Request, []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.res
}

// namedEndpoints builds one endpoint per name on 127.10.0.x:8000.
func namedEndpoints(names ...string) []*scheduling.Endpoint {
	out := make([]*scheduling.Endpoint, len(names))
	for i, n := range names {
		out[i] = schedulingtest.Endpoint(n).Address(fmt.Sprintf("127.10.0.%d", i+1)).Build()
	}
	return out
}

func keepNames(names ...string) func(*scheduling.Endpoint) bool {
	return func(e *scheduling.Endpoint) bool {
		for _, n := range names {
			if e.Name() == n {
				return true
			}
		}
		return false
	}
}

// scoreMap turns scored endpoints into name → score.
func scoreMap(scored []scheduling.ScoredEndpoint) map[string]float64 {
	m := make(map[string]float64, len(scored))
	for _, s := range scored {
		m[s.Endpoint.Name()] = s.Score
	}
	return m
}

func scoredNames(scored []scheduling.ScoredEndpoint) []string {
	out := make([]string, len(scored))
	for i, s := range scored {
		out[i] = s.Endpoint.Name()
	}
	return out
}

// diffScores reports the differences between two name → score maps, with
// a small tolerance for floating-point rounding.
func diffScores(got, want map[string]float64) string {
	var b strings.Builder
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			fmt.Fprintf(&b, "%s: missing, want %v\n", k, w)
		case math.IsNaN(g) || math.Abs(g-w) > 1e-9:
			fmt.Fprintf(&b, "%s: got %v, want %v\n", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "%s: unexpected (score %v)\n", k, g)
		}
	}
	return b.String()
}

func mustProfile(t testing.TB, name string, filters []scheduling.Filter, scorers []scheduling.WeightedScorer, picker scheduling.Picker) *scheduling.Profile {
	t.Helper()
	p, err := scheduling.NewProfile(name, filters, scorers, picker, nil)
	if err != nil {
		t.Fatalf("NewProfile(%q): %v", name, err)
	}
	return p
}

func TestProfileFiltersRunInOrderAndNarrow(t *testing.T) {
	t.Parallel()
	var log []string
	filters := []scheduling.Filter{
		&recordingFilter{name: "f1", keep: keepNames("a", "b", "c"), log: &log},
		&recordingFilter{name: "f2", keep: keepNames("b", "c", "d"), log: &log},
		&recordingFilter{name: "f3", keep: keepNames("c", "b"), log: &log},
	}
	picker := &schedulingtest.FakePicker{Name: "max"}
	p := mustProfile(t, "default", filters, nil, picker)
	candidates := namedEndpoints("a", "b", "c", "d")

	res, err := p.Run(t.Context(), &scheduling.Request{}, candidates)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantLog := []string{"f1 got a,b,c,d", "f2 got a,b,c", "f3 got b,c"}
	if !reflect.DeepEqual(log, wantLog) {
		t.Errorf("filter calls = %q, want %q", log, wantLog)
	}
	if got, want := scoredNames(picker.Last), []string{"b", "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("picker got %q, want %q (kept endpoints in filter order)", got, want)
	}
	if got := schedulingtest.Names(res.Targets); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("targets = %q, want [b]", got)
	}
	if got := schedulingtest.Names(candidates); !reflect.DeepEqual(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("candidates changed to %q", got)
	}

	log = nil
	scored, err := p.Scores(t.Context(), &scheduling.Request{}, candidates)
	if err != nil {
		t.Fatalf("Scores: %v", err)
	}
	if got, want := scoredNames(scored), []string{"b", "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Scores names = %q, want %q", got, want)
	}
	if !reflect.DeepEqual(log, wantLog) {
		t.Errorf("Scores filter calls = %q, want %q", log, wantLog)
	}
}

func TestProfileRunErrors(t *testing.T) {
	t.Parallel()
	dropAll := &schedulingtest.FakeFilter{Name: "drop-all", Keep: func(*scheduling.Endpoint) bool { return false }}
	keepA := &schedulingtest.FakeFilter{Name: "keep-a", Keep: keepNames("a")}
	tests := []struct {
		name       string
		filters    []scheduling.Filter
		picker     scheduling.Picker
		candidates []*scheduling.Endpoint
		// wantMsg are substrings the error must contain.
		wantMsg []string
		// scoresErr says whether Scores (which does not pick) fails too.
		scoresErr bool
	}{
		{
			name:       "nil candidates",
			picker:     &schedulingtest.FakePicker{},
			candidates: nil,
			wantMsg:    []string{`profile "p1"`},
			scoresErr:  true,
		},
		{
			name:       "empty candidates",
			picker:     &schedulingtest.FakePicker{},
			candidates: []*scheduling.Endpoint{},
			wantMsg:    []string{`profile "p1"`},
			scoresErr:  true,
		},
		{
			name:       "filter leaves nothing",
			filters:    []scheduling.Filter{dropAll},
			picker:     &schedulingtest.FakePicker{},
			candidates: namedEndpoints("a", "b"),
			wantMsg:    []string{`profile "p1"`, "filter drop-all (fake-filter) left no endpoints"},
			scoresErr:  true,
		},
		{
			name:       "second filter leaves nothing",
			filters:    []scheduling.Filter{keepA, dropAll},
			picker:     &schedulingtest.FakePicker{},
			candidates: namedEndpoints("a", "b"),
			wantMsg:    []string{`profile "p1"`, "drop-all"},
			scoresErr:  true,
		},
		{
			name:       "picker returns nil",
			picker:     fixedPicker{res: nil},
			candidates: namedEndpoints("a", "b"),
			wantMsg:    []string{`profile "p1"`, "picker fixed (fixed-picker) chose nothing"},
		},
		{
			name:       "picker returns no targets",
			picker:     fixedPicker{res: &scheduling.ProfileResult{}},
			candidates: namedEndpoints("a", "b"),
			wantMsg:    []string{`profile "p1"`, "chose nothing"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := mustProfile(t, "p1", tt.filters, nil, tt.picker)
			res, err := p.Run(t.Context(), &scheduling.Request{}, tt.candidates)
			if !errors.Is(err, scheduling.ErrNoEndpoints) {
				t.Fatalf("Run error = %v, want one wrapping ErrNoEndpoints", err)
			}
			if res != nil {
				t.Errorf("Run result = %+v, want nil on error", res)
			}
			for _, s := range tt.wantMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Run error %q does not contain %q", err, s)
				}
			}
			_, err = p.Scores(t.Context(), &scheduling.Request{}, tt.candidates)
			if tt.scoresErr != (err != nil) {
				t.Errorf("Scores error = %v, want error: %v", err, tt.scoresErr)
			}
			if err != nil && !errors.Is(err, scheduling.ErrNoEndpoints) {
				t.Errorf("Scores error = %v, want one wrapping ErrNoEndpoints", err)
			}
		})
	}
}

func TestProfileScores(t *testing.T) {
	t.Parallel()
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name    string
		scorers []scheduling.WeightedScorer
		want    map[string]float64
		// wantTarget is what a max picker chooses (first on ties).
		wantTarget string
	}{
		{
			name:       "no scorers gives zero scores",
			want:       map[string]float64{"a": 0, "b": 0, "c": 0, "d": 0},
			wantTarget: "a",
		},
		{
			name: "in-range scores pass through with weight 1",
			scorers: []scheduling.WeightedScorer{
				{Scorer: &schedulingtest.FakeScorer{Name: "s1", Scores: map[string]float64{"a": 0.25, "b": 0.5, "c": 1, "d": 0}}, Weight: 1},
			},
			want:       map[string]float64{"a": 0.25, "b": 0.5, "c": 1, "d": 0},
			wantTarget: "c",
		},
		{
			name: "out-of-range scores are clamped to [0, 1]",
			scorers: []scheduling.WeightedScorer{
				{Scorer: &schedulingtest.FakeScorer{Name: "s1", Scores: map[string]float64{"a": -0.5, "b": 1.7, "c": nan, "d": 0.3}}, Weight: 1},
			},
			want:       map[string]float64{"a": 0, "b": 1, "c": 0, "d": 0.3},
			wantTarget: "b",
		},
		{
			name: "infinities are clamped",
			scorers: []scheduling.WeightedScorer{
				{Scorer: &schedulingtest.FakeScorer{Name: "s1", Scores: map[string]float64{"a": inf, "b": -inf, "c": 0.5}}, Weight: 1},
			},
			want:       map[string]float64{"a": 1, "b": 0, "c": 0.5, "d": 0},
			wantTarget: "a",
		},
		{
			name: "clamping happens before the weight",
			scorers: []scheduling.WeightedScorer{
				{Scorer: &schedulingtest.FakeScorer{Name: "s1", Scores: map[string]float64{"a": 3, "b": -2, "c": nan, "d": 0.5}}, Weight: 2},
			},
			want:       map[string]float64{"a": 2, "b": 0, "c": 0, "d": 1},
			wantTarget: "a",
		},
		{
			name: "raw weights multiply and sum, not normalised",
			scorers: []scheduling.WeightedScorer{
				{Scorer: &schedulingtest.FakeScorer{Name: "s1", Scores: map[string]float64{"a": 0.5, "b": 1, "c": 0.1}}, Weight: 2},
				{Scorer: &schedulingtest.FakeScorer{Name: "s2", Scores: map[string]float64{"a": 1, "b": 0.25, "d": 0.9}}, Weight: 3},
			},
			// a = 2*0.5 + 3*1, b = 2*1 + 3*0.25, c = 2*0.1, d = 3*0.9
			want:       map[string]float64{"a": 4, "b": 2.75, "c": 0.2, "d": 2.7},
			wantTarget: "a",
		},
		{
			name: "weight 0 contributes nothing",
			scorers: []scheduling.WeightedScorer{
				{Scorer: &schedulingtest.FakeScorer{Name: "zero", Scores: map[string]float64{"a": 1, "b": 1, "c": 1, "d": 1}}, Weight: 0},
				{Scorer: &schedulingtest.FakeScorer{Name: "s2", Scores: map[string]float64{"c": 0.4}}, Weight: 1},
			},
			want:       map[string]float64{"a": 0, "b": 0, "c": 0.4, "d": 0},
			wantTarget: "c",
		},
		{
			name: "clamped scores of several scorers add up",
			scorers: []scheduling.WeightedScorer{
				{Scorer: &schedulingtest.FakeScorer{Name: "s1", Scores: map[string]float64{"a": 5, "b": -5, "c": nan}}, Weight: 0.5},
				{Scorer: &schedulingtest.FakeScorer{Name: "s2", Scores: map[string]float64{"a": 1.5, "b": 0.5, "c": 0.5}}, Weight: 1.5},
			},
			want:       map[string]float64{"a": 2, "b": 0.75, "c": 0.75, "d": 0},
			wantTarget: "a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			picker := &schedulingtest.FakePicker{Name: "max"}
			p := mustProfile(t, "p", nil, tt.scorers, picker)
			candidates := namedEndpoints("a", "b", "c", "d")

			scored, err := p.Scores(t.Context(), &scheduling.Request{}, candidates)
			if err != nil {
				t.Fatalf("Scores: %v", err)
			}
			if d := diffScores(scoreMap(scored), tt.want); d != "" {
				t.Errorf("Scores mismatch:\n%s", d)
			}
			if got, want := scoredNames(scored), []string{"a", "b", "c", "d"}; !reflect.DeepEqual(got, want) {
				t.Errorf("Scores order = %q, want %q", got, want)
			}

			res, err := p.Run(t.Context(), &scheduling.Request{}, candidates)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if d := diffScores(scoreMap(picker.Last), tt.want); d != "" {
				t.Errorf("scores given to the picker mismatch:\n%s", d)
			}
			if got := schedulingtest.Names(res.Targets); !reflect.DeepEqual(got, []string{tt.wantTarget}) {
				t.Errorf("targets = %q, want [%s]", got, tt.wantTarget)
			}
		})
	}
}

// TestProfileRunReusesBuffers runs a profile with shrinking and growing
// candidate lists so pooled scratch slices are reused, and checks that no
// score leaks from one run into the next.
func TestProfileRunReusesBuffers(t *testing.T) {
	picker := &schedulingtest.FakePicker{Name: "max"}
	scorer := &schedulingtest.FakeScorer{Name: "s", Scores: map[string]float64{"a": 1, "b": 0.5}}
	p := mustProfile(t, "p", nil, []scheduling.WeightedScorer{{Scorer: scorer, Weight: 1}}, picker)
	for _, names := range [][]string{{"a", "b", "x", "y"}, {"x", "y"}, {"y"}, {"b", "x", "y", "z", "w"}} {
		if _, err := p.Run(t.Context(), &scheduling.Request{}, namedEndpoints(names...)); err != nil {
			t.Fatalf("Run(%q): %v", names, err)
		}
		want := map[string]float64{}
		for _, n := range names {
			want[n] = scorer.Scores[n]
		}
		if d := diffScores(scoreMap(picker.Last), want); d != "" {
			t.Errorf("Run(%q) scores mismatch:\n%s", names, d)
		}
	}
}

// TestProfileRunConcurrent checks that one profile can run for many
// requests at once (run with -race).
func TestProfileRunConcurrent(t *testing.T) {
	t.Parallel()
	scorer := &schedulingtest.FakeScorer{Name: "s", Scores: map[string]float64{}}
	const groups = 8
	sets := make([][]*scheduling.Endpoint, groups)
	for g := range groups {
		names := make([]string, g+2)
		for i := range names {
			names[i] = fmt.Sprintf("g%d-%d", g, i)
			// The last endpoint of each group scores highest.
			scorer.Scores[names[i]] = float64(i+1) / float64(len(names))
		}
		sets[g] = namedEndpoints(names...)
	}
	p := mustProfile(t, "p", nil, []scheduling.WeightedScorer{{Scorer: scorer, Weight: 1}}, maxPicker{name: "max"})

	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g := range groups {
		wg.Go(func() {
			want := sets[g][len(sets[g])-1].Name()
			for range 200 {
				res, err := p.Run(context.Background(), &scheduling.Request{}, sets[g])
				if err != nil {
					errs <- err
					return
				}
				if got := res.Targets[0].Name(); got != want {
					errs <- fmt.Errorf("group %d picked %s, want %s", g, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestScoresReturnsACopy(t *testing.T) {
	t.Parallel()
	scorer := &schedulingtest.FakeScorer{Name: "s", Scores: map[string]float64{"a": 0.5}}
	p := mustProfile(t, "p", nil, []scheduling.WeightedScorer{{Scorer: scorer, Weight: 1}}, maxPicker{})
	eps := namedEndpoints("a", "b")
	first, err := p.Scores(t.Context(), &scheduling.Request{}, eps)
	if err != nil {
		t.Fatal(err)
	}
	first[0].Score = 99
	second, err := p.Scores(t.Context(), &scheduling.Request{}, eps)
	if err != nil {
		t.Fatal(err)
	}
	if second[0].Score != 0.5 {
		t.Errorf("second Scores()[0] = %v, want 0.5 (unaffected by changes to the first result)", second[0].Score)
	}
}

func TestNewProfile(t *testing.T) {
	t.Parallel()
	scorer := &schedulingtest.FakeScorer{Name: "queue"}
	filter := &schedulingtest.FakeFilter{Name: "f", Keep: func(*scheduling.Endpoint) bool { return true }}
	tests := []struct {
		name    string
		scorers []scheduling.WeightedScorer
		picker  scheduling.Picker
		wantErr []string
	}{
		{name: "valid", scorers: []scheduling.WeightedScorer{{Scorer: scorer, Weight: 2}}, picker: maxPicker{}},
		{name: "weight 0 is allowed", scorers: []scheduling.WeightedScorer{{Scorer: scorer, Weight: 0}}, picker: maxPicker{}},
		{name: "no scorer", picker: maxPicker{}},
		{name: "nil picker", scorers: []scheduling.WeightedScorer{{Scorer: scorer, Weight: 1}}, wantErr: []string{`profile "prof"`, "no picker"}},
		{
			name:    "negative weight",
			scorers: []scheduling.WeightedScorer{{Scorer: scorer, Weight: 1}, {Scorer: scorer, Weight: -0.5}},
			picker:  maxPicker{},
			wantErr: []string{`profile "prof"`, "queue (fake-scorer)", "weight must be a finite number >= 0, got -0.5"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := scheduling.NewProfile("prof", []scheduling.Filter{filter}, tt.scorers, tt.picker, nil)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("NewProfile succeeded, want an error containing %q", tt.wantErr)
				}
				if p != nil {
					t.Errorf("NewProfile returned a profile with its error")
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("NewProfile: %v", err)
			}
			if p.Name() != "prof" {
				t.Errorf("Name() = %q, want prof", p.Name())
			}
			if len(p.Filters()) != 1 || p.Filters()[0] != filter {
				t.Errorf("Filters() = %v, want [f]", p.Filters())
			}
			if !reflect.DeepEqual(p.Scorers(), tt.scorers) {
				t.Errorf("Scorers() = %v, want %v", p.Scorers(), tt.scorers)
			}
			if p.Picker() != tt.picker {
				t.Errorf("Picker() = %v, want %v", p.Picker(), tt.picker)
			}
		})
	}
}

// TestNewProfileRejectsNaNWeight: a NaN weight is not ">= 0" (the
// convention for weights), yet NewProfile only checks Weight < 0.
func TestNewProfileRejectsNaNWeight(t *testing.T) {
	scorer := &schedulingtest.FakeScorer{Name: "queue"}
	_, err := scheduling.NewProfile("prof", nil, []scheduling.WeightedScorer{{Scorer: scorer, Weight: math.NaN()}}, maxPicker{}, nil)
	if err == nil {
		t.Fatal("NewProfile accepted a NaN weight")
	}
}

// dominanceScorer asks for strict dominance (C-37), as the
// usage-weight-scorer does, and scores nothing.
type dominanceScorer struct{}

func (dominanceScorer) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "dominance-scorer", Name: "d"}
}

func (dominanceScorer) Category() scheduling.ScorerCategory { return scheduling.Distribution }

func (dominanceScorer) Score(_ context.Context, req *scheduling.Request, _ []*scheduling.Endpoint, scores []float64) {
	scheduling.StrictDominanceKey.Set(req, true)
	clear(scores)
}

// dominanceProbe records whether its profile's scorers asked for strict
// dominance.
type dominanceProbe struct{ asked *[]bool }

func (dominanceProbe) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "dominance-probe", Name: "probe"}
}

func (p dominanceProbe) Pick(_ context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	*p.asked = append(*p.asked, scheduling.TakeStrictDominance(req))
	return &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{scored[0].Endpoint}}
}

// TestC37_StrictDominanceStaysInItsProfile: a profile whose picker ignores
// the request for strict dominance (max-score) does not pass it on to the
// next profile of the same request.
func TestC37_StrictDominanceStaysInItsProfile(t *testing.T) {
	var asked []bool
	first := mustProfile(t, "first", nil, []scheduling.WeightedScorer{{Scorer: dominanceScorer{}, Weight: 1}}, maxPicker{name: "max"})
	second := mustProfile(t, "second", nil, nil, dominanceProbe{asked: &asked})
	third := mustProfile(t, "third", nil, []scheduling.WeightedScorer{{Scorer: dominanceScorer{}, Weight: 1}}, dominanceProbe{asked: &asked})
	req := &scheduling.Request{}
	for _, p := range []*scheduling.Profile{first, second, third, second} {
		if _, err := p.Run(t.Context(), req, namedEndpoints("a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	if want := []bool{false, true, false}; !reflect.DeepEqual(asked, want) {
		t.Fatalf("strict dominance seen by the probes: %v, want %v", asked, want)
	}
}

// decidingPicker records that the scorers decided, as the strategy-picker
// does.
type decidingPicker struct{}

func (decidingPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "deciding-picker", Name: "decides"}
}

func (decidingPicker) Pick(_ context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	scheduling.DecidedByKey.Set(req, scheduling.DecidedByScorers)
	return &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{scored[0].Endpoint}}
}

// TestC38_DecidedByIsTheLatestRuns: a profile run whose picker records
// nothing (max-score) leaves "not recorded", not the record of an earlier
// pass of the same request.
func TestC38_DecidedByIsTheLatestRuns(t *testing.T) {
	deciding := mustProfile(t, "deciding", nil, nil, decidingPicker{})
	silent := mustProfile(t, "silent", nil, nil, maxPicker{name: "max"})
	req := &scheduling.Request{}
	if _, err := deciding.Run(t.Context(), req, namedEndpoints("a", "b")); err != nil {
		t.Fatal(err)
	}
	if by, ok := scheduling.DecidedByKey.Get(req); !ok || by != scheduling.DecidedByScorers {
		t.Fatalf("after the deciding picker: %v %v", by, ok)
	}
	if _, err := silent.Run(t.Context(), req, namedEndpoints("a", "b")); err != nil {
		t.Fatal(err)
	}
	if by, ok := scheduling.DecidedByKey.Get(req); ok {
		t.Fatalf("after a picker that records nothing: %v, want not recorded", by)
	}
}
