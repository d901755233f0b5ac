package maxscore

import (
	"math"
	"math/rand/v2"
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
	if _, err := New("x", Params{MaxNumOfEndpoints: 0}, schedulingtest.NewHandle(t)); err == nil {
		t.Error("New accepted maxNumOfEndpoints 0")
	}
	if _, err := New("x", DefaultParams(), nil); err == nil {
		t.Error("New accepted a nil handle")
	}
	p, err := New("", DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.TypedName().Name != Type {
		t.Errorf("default name = %q, want %q", p.TypedName().Name, Type)
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

func TestPick(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name   string
		scores []float64
		max    int
		// want lists the acceptable names per position.
		want [][]string
	}{
		{name: "no endpoints", scores: nil, max: 1, want: nil},
		{name: "one endpoint", scores: []float64{0}, max: 1, want: [][]string{{"ep-0"}}},
		{name: "single max", scores: []float64{0.1, 0.9, 0.5}, max: 1, want: [][]string{{"ep-1"}}},
		{name: "tie for max", scores: []float64{0.9, 0.2, 0.9}, max: 1, want: [][]string{{"ep-0", "ep-2"}}},
		{name: "all zero", scores: []float64{0, 0, 0}, max: 1, want: [][]string{{"ep-0", "ep-1", "ep-2"}}},
		{name: "two of three sorted", scores: []float64{0.2, 0.25, 0.3}, max: 2, want: [][]string{{"ep-2"}, {"ep-1"}}},
		{name: "more wanted than available", scores: []float64{0.2, 0.25, 0.3}, max: 4, want: [][]string{{"ep-2"}, {"ep-1"}, {"ep-0"}}},
		{
			name: "tie on top, exact count", scores: []float64{0.3, 0.25, 0.3}, max: 3,
			want: [][]string{{"ep-0", "ep-2"}, {"ep-0", "ep-2"}, {"ep-1"}},
		},
		{
			name: "tie at the boundary", scores: []float64{0.5, 1, 0.5, 0.1, 0.5}, max: 2,
			want: [][]string{{"ep-1"}, {"ep-0", "ep-2", "ep-4"}},
		},
		{name: "weights above one", scores: []float64{2.5, 3, 1}, max: 1, want: [][]string{{"ep-1"}}},
		{name: "NaN ranks last", scores: []float64{nan, 0, nan}, max: 1, want: [][]string{{"ep-1"}}},
		{name: "NaN ranks last, several", scores: []float64{nan, 0.2, nan, 0.1}, max: 3, want: [][]string{{"ep-1"}, {"ep-3"}, {"ep-0", "ep-2"}}},
		{name: "only NaN", scores: []float64{nan, nan}, max: 1, want: [][]string{{"ep-0", "ep-1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, tt.max)
			for range 50 { // ties must always resolve inside the allowed sets
				res := p.Pick(t.Context(), &scheduling.Request{}, schedulingtest.Scored(tt.scores...))
				if res == nil {
					t.Fatal("nil result")
				}
				got := schedulingtest.Names(res.Targets)
				if len(got) != len(tt.want) {
					t.Fatalf("got %v, want %d targets", got, len(tt.want))
				}
				for i, name := range got {
					if !slices.Contains(tt.want[i], name) {
						t.Fatalf("target %d = %s, want one of %v (all: %v)", i, name, tt.want[i], got)
					}
				}
				if dup := duplicate(got); dup != "" {
					t.Fatalf("%s returned twice: %v", dup, got)
				}
			}
		})
	}
}

func duplicate(names []string) string {
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return n
		}
		seen[n] = true
	}
	return ""
}

// TestPickMatchesSort checks the partial selection against a full sort on
// random inputs with many ties.
func TestPickMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 2000 {
		n := 1 + rng.IntN(40)
		scores := make([]float64, n)
		for i := range scores {
			scores[i] = float64(rng.IntN(5)) / 4
		}
		k := 1 + rng.IntN(n+2)
		p := newPicker(t, k)
		scored := schedulingtest.Scored(scores...)
		res := p.Pick(t.Context(), nil, scored)

		want := slices.Clone(scores)
		slices.SortFunc(want, func(a, b float64) int { return -compare(a, b) })
		want = want[:min(k, n)]
		byName := map[string]float64{}
		for i, e := range schedulingtest.Endpoints(n, nil) {
			byName[e.Name()] = scores[i]
		}
		got := make([]float64, len(res.Targets))
		for i, e := range res.Targets {
			got[i] = byName[e.Name()]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: scores %v, k %d: picked scores %v, want %v", trial, scores, k, got, want)
		}
		if dup := duplicate(schedulingtest.Names(res.Targets)); dup != "" {
			t.Fatalf("trial %d: %s returned twice", trial, dup)
		}
	}
}

func compare(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestPickTiesUniform(t *testing.T) {
	const trials = 30000
	tests := []struct {
		name   string
		scores []float64
		max    int
		// want maps "name,name,…" to its expected probability.
		want map[string]float64
	}{
		{
			name: "one of three tied", scores: []float64{0.9, 0.1, 0.9, 0.9, 0.5}, max: 1,
			want: map[string]float64{"ep-0": 1. / 3, "ep-2": 1. / 3, "ep-3": 1. / 3},
		},
		{
			name: "ordered pairs of three tied", scores: []float64{1, 1, 1, 0.5}, max: 2,
			want: map[string]float64{
				"ep-0,ep-1": 1. / 6, "ep-1,ep-0": 1. / 6, "ep-0,ep-2": 1. / 6,
				"ep-2,ep-0": 1. / 6, "ep-1,ep-2": 1. / 6, "ep-2,ep-1": 1. / 6,
			},
		},
		{
			name: "fallback among ties", scores: []float64{0.5, 1, 0.5, 0.5}, max: 2,
			want: map[string]float64{"ep-1,ep-0": 1. / 3, "ep-1,ep-2": 1. / 3, "ep-1,ep-3": 1. / 3},
		},
		{
			name: "tied group above the boundary", scores: []float64{1, 0.5, 1, 0.5}, max: 3,
			want: map[string]float64{
				"ep-0,ep-2,ep-1": 1. / 4, "ep-0,ep-2,ep-3": 1. / 4,
				"ep-2,ep-0,ep-1": 1. / 4, "ep-2,ep-0,ep-3": 1. / 4,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, tt.max)
			template := schedulingtest.Scored(tt.scores...)
			scored := make([]scheduling.ScoredEndpoint, len(template))
			counts := map[string]int{}
			for range trials {
				copy(scored, template) // Pick may reorder
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

// TestPickLargeTie checks uniformity over many tied endpoints, where the
// reservoir replaces its choice most often.
func TestPickLargeTie(t *testing.T) {
	const n, trials = 50, 50000
	p := newPicker(t, 1)
	scored := schedulingtest.Scored(make([]float64, n)...)
	counts := map[string]int{}
	for range trials {
		counts[p.Pick(t.Context(), nil, scored).Targets[0].Name()]++
	}
	for _, e := range scored {
		schedulingtest.WithinBinomial(t, e.Endpoint.Name(), counts[e.Endpoint.Name()], trials, 1./n)
	}
}

func TestPickDeterministic(t *testing.T) {
	run := func() []string {
		p := newPicker(t, 2)
		var out []string
		for range 20 {
			out = append(out, schedulingtest.Names(p.Pick(t.Context(), nil, schedulingtest.Scored(0, 0, 0, 0, 0)).Targets)...)
		}
		return out
	}
	if a, b := run(), run(); !slices.Equal(a, b) {
		t.Errorf("same seed gave different picks:\n%v\n%v", a, b)
	}
}

func TestPickConcurrent(t *testing.T) {
	p := newPicker(t, 1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if res := p.Pick(t.Context(), nil, schedulingtest.Scored(0.5, 0.5, 0.1)); len(res.Targets) != 1 {
					t.Errorf("got %d targets", len(res.Targets))
				}
			}
		})
	}
	wg.Wait()
}

func TestProfileRun(t *testing.T) {
	p := newPicker(t, 2)
	scorer := &schedulingtest.FakeScorer{Name: "s", Scores: map[string]float64{"ep-0": 0.2, "ep-1": 0.9, "ep-2": 0.5}}
	prof, err := scheduling.NewProfile("default", nil, []scheduling.WeightedScorer{{Scorer: scorer, Weight: 2}}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := prof.Run(t.Context(), &scheduling.Request{}, schedulingtest.Endpoints(3, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := schedulingtest.Names(res.Targets), []string{"ep-1", "ep-2"}; !slices.Equal(got, want) {
		t.Errorf("targets = %v, want %v", got, want)
	}
}
