package weightedrandom

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/picktest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// TestFactory checks the registration's wiring; the parameters themselves
// (decoding, defaults, validation) are tested in the internal pick package.
func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, picktest.FactoryCases())
}

func TestNew(t *testing.T) {
	if _, err := New("x", Params{MaxNumOfEndpoints: -3}, schedulingtest.NewHandle(t)); err == nil {
		t.Error("New accepted maxNumOfEndpoints -3")
	}
	if _, err := New("x", DefaultParams(), nil); err == nil {
		t.Error("New accepted a nil handle")
	}
}

func newPicker(t testing.TB, max int) *Picker {
	t.Helper()
	p, err := New(Type, Params{MaxNumOfEndpoints: max}, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// successive returns the probability of drawing the ordered outcome (by
// index) when each draw takes an endpoint with probability proportional to
// its weight among those left.
func successive(weights []float64, outcome []int) float64 {
	left := 0.0
	for _, w := range weights {
		left += w
	}
	p := 1.0
	for _, i := range outcome {
		p *= weights[i] / left
		left -= weights[i]
	}
	return p
}

func TestPickDistribution(t *testing.T) {
	const trials = 40000
	nan := math.NaN()
	tests := []struct {
		name   string
		scores []float64
		max    int
		// want maps "name,name,…" to its expected probability.
		want map[string]float64
	}{
		{
			name: "proportional to score", scores: []float64{0.1, 0.2, 0.3, 0.4}, max: 1,
			want: map[string]float64{"ep-0": 0.1, "ep-1": 0.2, "ep-2": 0.3, "ep-3": 0.4},
		},
		{
			name: "weights above one", scores: []float64{1, 9}, max: 1,
			want: map[string]float64{"ep-0": 0.1, "ep-1": 0.9},
		},
		{
			// U^(1/s) underflows to 0 for such scores; ln(U)/s does not.
			name: "tiny scores", scores: []float64{0.001, 0.003}, max: 1,
			want: map[string]float64{"ep-0": 0.25, "ep-1": 0.75},
		},
		{
			// The sum overflows to +Inf; the picker falls back to A-Res keys.
			name: "scores that overflow their sum", scores: []float64{math.MaxFloat64, math.MaxFloat64 / 3}, max: 1,
			want: map[string]float64{"ep-0": 0.75, "ep-1": 0.25},
		},
		{
			name: "equal scores are uniform", scores: []float64{0.7, 0.7, 0.7}, max: 1,
			want: map[string]float64{"ep-0": 1. / 3, "ep-1": 1. / 3, "ep-2": 1. / 3},
		},
		{
			name: "zero score never picked first", scores: []float64{0.3, 0, nan}, max: 1,
			want: map[string]float64{"ep-0": 1},
		},
		{
			name: "all zero is uniform", scores: []float64{0, 0, 0, 0}, max: 1,
			want: map[string]float64{"ep-0": 0.25, "ep-1": 0.25, "ep-2": 0.25, "ep-3": 0.25},
		},
		{
			name: "zero scores fill the places left, uniformly", scores: []float64{0, 0.5, 0, 0}, max: 3,
			want: map[string]float64{
				"ep-1,ep-0,ep-2": 1. / 6, "ep-1,ep-2,ep-0": 1. / 6, "ep-1,ep-0,ep-3": 1. / 6,
				"ep-1,ep-3,ep-0": 1. / 6, "ep-1,ep-2,ep-3": 1. / 6, "ep-1,ep-3,ep-2": 1. / 6,
			},
		},
		{
			name: "all zero, ordered pairs uniform", scores: []float64{0, 0, 0}, max: 2,
			want: map[string]float64{
				"ep-0,ep-1": 1. / 6, "ep-1,ep-0": 1. / 6, "ep-0,ep-2": 1. / 6,
				"ep-2,ep-0": 1. / 6, "ep-1,ep-2": 1. / 6, "ep-2,ep-1": 1. / 6,
			},
		},
		{
			name: "more wanted than available", scores: []float64{0.25, 0.75}, max: 5,
			want: map[string]float64{"ep-0,ep-1": 0.25, "ep-1,ep-0": 0.75},
		},
	}
	// Successive weighted sampling without replacement, the distribution of
	// A-Res with several endpoints.
	weights := []float64{1, 2, 3, 4}
	pairs := map[string]float64{}
	for i := range weights {
		for j := range weights {
			if i != j {
				pairs["ep-"+string(rune('0'+i))+",ep-"+string(rune('0'+j))] = successive(weights, []int{i, j})
			}
		}
	}
	tests = append(tests, struct {
		name   string
		scores []float64
		max    int
		want   map[string]float64
	}{name: "ordered pairs follow successive sampling", scores: weights, max: 2, want: pairs})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, tt.max)
			template := schedulingtest.Scored(tt.scores...)
			scored := make([]scheduling.ScoredEndpoint, len(template))
			counts := map[string]int{}
			for range trials {
				copy(scored, template)
				res := p.Pick(t.Context(), nil, scored)
				counts[strings.Join(schedulingtest.Names(res.Targets), ",")]++
			}
			for outcome, n := range counts {
				if _, ok := tt.want[outcome]; !ok {
					t.Errorf("unexpected outcome %s (%d times)", outcome, n)
				}
			}
			for outcome, prob := range tt.want {
				schedulingtest.WithinBinomial(t, outcome, counts[outcome], trials, prob)
			}
		})
	}
}

func TestPickEdgeCases(t *testing.T) {
	p := newPicker(t, 2)
	if res := p.Pick(t.Context(), nil, nil); res == nil || len(res.Targets) != 0 {
		t.Errorf("empty input: got %+v, want an empty result", res)
	}
	scored := schedulingtest.Scored(0.2, 0, 0.9)
	before := slices.Clone(scored)
	res := p.Pick(t.Context(), nil, scored)
	if len(res.Targets) != 2 {
		t.Fatalf("got %d targets, want 2", len(res.Targets))
	}
	if !slices.Equal(scored, before) {
		t.Errorf("Pick modified its input: %v, was %v", scored, before)
	}
	one := newPicker(t, 1)
	if got := one.Pick(t.Context(), nil, schedulingtest.Scored(0)).Targets; len(got) != 1 || got[0].Name() != "ep-0" {
		t.Errorf("single zero-scored endpoint: got %v", schedulingtest.Names(got))
	}
}

func TestPickDeterministic(t *testing.T) {
	run := func(max int) []string {
		p := newPicker(t, max)
		var out []string
		for range 20 {
			out = append(out, schedulingtest.Names(p.Pick(t.Context(), nil, schedulingtest.Scored(0.1, 0.5, 0.2, 0, 0.9)).Targets)...)
		}
		return out
	}
	for _, max := range []int{1, 3} {
		if a, b := run(max), run(max); !slices.Equal(a, b) {
			t.Errorf("max %d: same seed gave different picks:\n%v\n%v", max, a, b)
		}
	}
}

func TestPickConcurrent(t *testing.T) {
	for _, max := range []int{1, 2} {
		p := newPicker(t, max)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 200 {
					if res := p.Pick(t.Context(), nil, schedulingtest.Scored(0.5, 0, 0.1)); len(res.Targets) != max {
						t.Errorf("got %d targets, want %d", len(res.Targets), max)
					}
				}
			})
		}
		wg.Wait()
	}
}
