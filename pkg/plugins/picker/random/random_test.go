package random

import (
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
	if _, err := New("x", Params{}, schedulingtest.NewHandle(t)); err == nil {
		t.Error("New accepted maxNumOfEndpoints 0")
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

func TestPick(t *testing.T) {
	const trials = 30000
	tests := []struct {
		name    string
		scores  []float64
		max     int
		wantLen int
	}{
		{name: "no endpoints", scores: nil, max: 1, wantLen: 0},
		{name: "one of three, scores ignored", scores: []float64{0.1, 0.2, 0.9}, max: 1, wantLen: 1},
		{name: "two of three", scores: []float64{0.1, 0.2, 0.3}, max: 2, wantLen: 2},
		{name: "fewer than wanted", scores: []float64{0.1, 0.2}, max: 5, wantLen: 2},
		{name: "exactly as many", scores: []float64{0, 0, 0}, max: 3, wantLen: 3},
		{name: "one of ten", scores: make([]float64, 10), max: 1, wantLen: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, tt.max)
			n := len(tt.scores)
			if n == 0 {
				if res := p.Pick(t.Context(), nil, nil); res == nil || len(res.Targets) != 0 {
					t.Fatalf("got %+v, want an empty result", res)
				}
				return
			}
			template := schedulingtest.Scored(tt.scores...)
			scored := make([]scheduling.ScoredEndpoint, n)
			first := map[string]int{}
			chosen := map[string]int{}
			for range trials {
				copy(scored, template) // Pick may reorder
				res := p.Pick(t.Context(), nil, scored)
				names := schedulingtest.Names(res.Targets)
				if len(names) != tt.wantLen {
					t.Fatalf("got %v, want %d targets", names, tt.wantLen)
				}
				sorted := slices.Clone(names)
				slices.Sort(sorted)
				if len(slices.Compact(sorted)) != len(names) {
					t.Fatalf("duplicate target in %v", names)
				}
				first[names[0]]++
				for _, name := range names {
					chosen[name]++
				}
			}
			for _, e := range schedulingtest.Endpoints(n, nil) {
				schedulingtest.WithinBinomial(t, "first "+e.Name(), first[e.Name()], trials, 1/float64(n))
				schedulingtest.WithinBinomial(t, "chosen "+e.Name(), chosen[e.Name()], trials, float64(tt.wantLen)/float64(n))
			}
		})
	}
}

// TestPickOrderedPairs checks every ordered pair is equally likely.
func TestPickOrderedPairs(t *testing.T) {
	const trials = 30000
	p := newPicker(t, 2)
	scored := schedulingtest.Scored(0, 0, 0) // reordering it between picks is harmless
	counts := map[string]int{}
	for range trials {
		counts[strings.Join(schedulingtest.Names(p.Pick(t.Context(), nil, scored).Targets), ",")]++
	}
	if len(counts) != 6 {
		t.Errorf("got %d distinct ordered pairs, want 6: %v", len(counts), counts)
	}
	for pair, c := range counts {
		schedulingtest.WithinBinomial(t, pair, c, trials, 1./6)
	}
}

func TestPickConcurrent(t *testing.T) {
	p := newPicker(t, 2)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if res := p.Pick(t.Context(), nil, schedulingtest.Scored(0, 0, 0)); len(res.Targets) != 2 {
					t.Errorf("got %d targets", len(res.Targets))
				}
			}
		})
	}
	wg.Wait()
}

// TestC13_RandomUniformOverEligibleCandidates: the Random strategy draws
// uniformly over the eligible candidates (those the profile's filters
// kept), whatever their scores, and never an ineligible one.
func TestC13_RandomUniformOverEligibleCandidates(t *testing.T) {
	const trials = 60000
	p := newPicker(t, 1)
	eligible := map[string]bool{"ep-0": true, "ep-2": true, "ep-3": true, "ep-5": true, "ep-6": true}
	filter := &schedulingtest.FakeFilter{Name: "eligibility", Keep: func(e *scheduling.Endpoint) bool { return eligible[e.Name()] }}
	scorer := &schedulingtest.FakeScorer{Name: "s", Scores: map[string]float64{"ep-0": 1, "ep-2": 0.9, "ep-5": 0.1}}
	prof, err := scheduling.NewProfile("default", []scheduling.Filter{filter}, []scheduling.WeightedScorer{{Scorer: scorer, Weight: 5}}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := schedulingtest.Endpoints(8, nil)
	counts := map[string]int{}
	for range trials {
		res, err := prof.Run(t.Context(), &scheduling.Request{}, eps)
		if err != nil {
			t.Fatal(err)
		}
		counts[res.Targets[0].Name()]++
	}
	for _, e := range eps {
		if !eligible[e.Name()] {
			if counts[e.Name()] != 0 {
				t.Errorf("ineligible %s was picked %d times", e.Name(), counts[e.Name()])
			}
			continue
		}
		schedulingtest.WithinBinomial(t, e.Name(), counts[e.Name()], trials, 1./5)
	}
}
