package pick

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// fakePicker records the parameters its factory was given.
type fakePicker struct{ p Params }

func (f *fakePicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fake-picker"}
}

func (f *fakePicker) Pick(_ context.Context, _ *scheduling.Request, _ []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return nil
}

// TestParams decodes and validates Params the way every picker's factory
// does (scheduling.Typed), so the pickers' own tests only check the wiring.
func TestParams(t *testing.T) {
	factory := scheduling.Typed(DefaultParams, func(_ string, p Params, _ scheduling.Handle) (*fakePicker, error) {
		return &fakePicker{p: p}, nil
	})
	tests := []struct {
		name    string
		raw     string
		wantMax int
		wantErr string
	}{
		{name: "no parameters", raw: "", wantMax: 1},
		{name: "null", raw: "null", wantMax: 1},
		{name: "empty object", raw: "{}", wantMax: 1},
		{name: "two endpoints", raw: `{"maxNumOfEndpoints": 2}`, wantMax: 2},
		{name: "three endpoints", raw: `{"maxNumOfEndpoints": 3}`, wantMax: 3},
		{name: "zero", raw: `{"maxNumOfEndpoints": 0}`, wantErr: "maxNumOfEndpoints: must be >= 1, got 0"},
		{name: "negative", raw: `{"maxNumOfEndpoints": -1}`, wantErr: "maxNumOfEndpoints: must be >= 1, got -1"},
		{name: "more negative", raw: `{"maxNumOfEndpoints": -2}`, wantErr: "maxNumOfEndpoints: must be >= 1, got -2"},
		{name: "unknown key", raw: `{"maxEndpoints": 2}`, wantErr: `unknown field "maxEndpoints"`},
		{name: "unknown key beside a valid one", raw: `{"maxNumOfEndpoints": 2, "temperature": 1}`, wantErr: `unknown field "temperature"`},
		{name: "another unknown key", raw: `{"seed": 4}`, wantErr: `unknown field "seed"`},
		{name: "string", raw: `{"maxNumOfEndpoints": "2"}`, wantErr: "maxNumOfEndpoints: expected an integer"},
		{name: "list", raw: `{"maxNumOfEndpoints": [1]}`, wantErr: "maxNumOfEndpoints: expected an integer"},
		{name: "boolean", raw: `{"maxNumOfEndpoints": true}`, wantErr: "maxNumOfEndpoints: expected an integer"},
		{name: "fraction", raw: `{"maxNumOfEndpoints": 1.5}`, wantErr: "maxNumOfEndpoints: expected an integer"},
		{name: "not an object", raw: `3`, wantErr: "expected an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw json.RawMessage
			if tt.raw != "" {
				raw = json.RawMessage(tt.raw)
			}
			got, err := factory("p", raw, schedulingtest.NewHandle(t))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if m := got.(*fakePicker).p.MaxNumOfEndpoints; m != tt.wantMax {
				t.Errorf("MaxNumOfEndpoints = %d, want %d", m, tt.wantMax)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		max     int
		wantErr string
	}{
		{max: 1},
		{max: 1000},
		{max: 0, wantErr: "maxNumOfEndpoints: must be >= 1, got 0"},
		{max: -5, wantErr: "maxNumOfEndpoints: must be >= 1, got -5"},
	} {
		p := Params{MaxNumOfEndpoints: tt.max}
		err := p.Validate()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
			t.Errorf("Validate(%d) = %v, want %q", tt.max, err, tt.wantErr)
		}
	}
	if d := DefaultParams(); d.Validate() != nil || d.MaxNumOfEndpoints != 1 {
		t.Errorf("DefaultParams() = %+v", d)
	}
}

// scoredOf builds scored endpoints named ep-0, ep-1, … with the given scores.
func scoredOf(scores ...float64) []scheduling.ScoredEndpoint {
	eps := schedulingtest.Endpoints(len(scores), nil)
	out := make([]scheduling.ScoredEndpoint, len(scores))
	for i, e := range eps {
		out[i] = scheduling.ScoredEndpoint{Endpoint: e, Score: scores[i]}
	}
	return out
}

func TestSingle(t *testing.T) {
	e := schedulingtest.Endpoint("a").Build()
	res := Single(e)
	if len(res.Targets) != 1 || res.Targets[0] != e {
		t.Fatalf("Single(a).Targets = %v", schedulingtest.Names(res.Targets))
	}
	if n := testing.AllocsPerRun(100, func() { Single(e) }); n != 1 {
		t.Errorf("Single allocates %v times, want 1", n)
	}
}

func TestResult(t *testing.T) {
	scored := scoredOf(0.1, 0.2, 0.3)
	if got := schedulingtest.Names(Result(scored[:2]).Targets); !slices.Equal(got, []string{"ep-0", "ep-1"}) {
		t.Errorf("Result = %v, want [ep-0 ep-1]", got)
	}
	if got := Result(nil).Targets; len(got) != 0 {
		t.Errorf("Result(nil) = %v, want no targets", got)
	}
}

func TestRank(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{
		{0, 0}, {0.5, 0.5}, {-1, -1}, {3, 3},
		{math.Inf(1), math.Inf(1)}, {math.Inf(-1), math.Inf(-1)}, {math.NaN(), math.Inf(-1)},
	} {
		if got := Rank(tt.in); got != tt.want {
			t.Errorf("Rank(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestSelectTopMatchesSort checks SelectTop against a full sort on random
// inputs with many ties and NaNs: same ranks on top, in order, and s still
// a permutation of its input.
func TestSelectTopMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	values := []float64{0, 0.25, 0.5, 1, math.NaN(), math.Inf(-1), -0.5}
	for trial := range 3000 {
		n := 1 + rng.IntN(40)
		scores := make([]float64, n)
		for i := range scores {
			scores[i] = values[rng.IntN(len(values))]
		}
		k := 1 + rng.IntN(n)
		s := scoredOf(scores...)
		SelectTop(rng, s, k)

		want := make([]float64, n)
		for i, v := range scores {
			want[i] = Rank(v)
		}
		slices.SortFunc(want, func(a, b float64) int { return -cmpFloat(a, b) })
		got := make([]float64, k)
		for i := range got {
			got[i] = Rank(s[i].Score)
		}
		if !slices.Equal(got, want[:k]) {
			t.Fatalf("trial %d: scores %v, k %d: top ranks %v, want %v", trial, scores, k, got, want[:k])
		}
		names := schedulingtest.Names(endpoints(s))
		slices.Sort(names)
		wantNames := schedulingtest.Names(schedulingtest.Endpoints(n, nil))
		slices.Sort(wantNames)
		if !slices.Equal(names, wantNames) {
			t.Fatalf("trial %d: s is no longer a permutation of its input: %v", trial, names)
		}
	}
}

func endpoints(s []scheduling.ScoredEndpoint) []*scheduling.Endpoint {
	out := make([]*scheduling.Endpoint, len(s))
	for i := range s {
		out[i] = s[i].Endpoint
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// within fails unless count is within five standard deviations of the
// binomial expectation n·p. The seed is fixed, so the test is deterministic.
func within(t *testing.T, what string, count, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(count)-mean) > 5*sd+1e-9 {
		t.Errorf("%s: count %d, want %.0f ± %.0f", what, count, mean, 5*sd)
	}
}

// TestSelectTopTiesUniform checks that ties are broken uniformly, both
// across the k boundary and inside the top k.
func TestSelectTopTiesUniform(t *testing.T) {
	const trials = 30000
	nan := math.NaN()
	tests := []struct {
		name   string
		scores []float64
		k      int
		want   map[string]float64
	}{
		{
			name: "ordered pairs of three tied", scores: []float64{1, 1, 1, 0.5}, k: 2,
			want: map[string]float64{
				"ep-0,ep-1": 1. / 6, "ep-1,ep-0": 1. / 6, "ep-0,ep-2": 1. / 6,
				"ep-2,ep-0": 1. / 6, "ep-1,ep-2": 1. / 6, "ep-2,ep-1": 1. / 6,
			},
		},
		{
			name: "tied group above the boundary", scores: []float64{1, 0.5, 1, 0.5}, k: 3,
			want: map[string]float64{
				"ep-0,ep-2,ep-1": 1. / 4, "ep-0,ep-2,ep-3": 1. / 4,
				"ep-2,ep-0,ep-1": 1. / 4, "ep-2,ep-0,ep-3": 1. / 4,
			},
		},
		{
			name: "NaN ties with -Inf", scores: []float64{nan, 0, math.Inf(-1)}, k: 2,
			want: map[string]float64{"ep-1,ep-0": 1. / 2, "ep-1,ep-2": 1. / 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			template := scoredOf(tt.scores...)
			s := make([]scheduling.ScoredEndpoint, len(template))
			counts := map[string]int{}
			for range trials {
				copy(s, template)
				SelectTop(rng, s, tt.k)
				counts[strings.Join(schedulingtest.Names(endpoints(s[:tt.k])), ",")]++
			}
			for outcome, n := range counts {
				if _, ok := tt.want[outcome]; !ok {
					t.Errorf("unexpected outcome %s (%d times)", outcome, n)
				}
			}
			for outcome, prob := range tt.want {
				within(t, outcome, counts[outcome], trials, prob)
			}
		})
	}
}

func TestSelectTopAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := scoredOf(0.1, 0.5, 0.5, 0.9, 0.1, 0.5, 0.9, 0)
	if n := testing.AllocsPerRun(100, func() { SelectTop(rng, s, 3) }); n != 0 {
		t.Errorf("SelectTop allocates %v times, want 0", n)
	}
}
