package weightedroundrobin

import (
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/picktest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

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

// weighted returns scored endpoints ep-0 … with the given weights; a
// negative weight below -100 means "no weight attribute".
func weighted(weights ...int) []scheduling.ScoredEndpoint {
	eps := schedulingtest.Endpoints(len(weights), func(i int, b *schedulingtest.EndpointBuilder) {
		if weights[i] >= -100 {
			b.Weight(weights[i])
		}
	})
	out := make([]scheduling.ScoredEndpoint, len(eps))
	for i, e := range eps {
		out[i] = scheduling.ScoredEndpoint{Endpoint: e, Score: float64(len(eps) - i)} // scores must not matter
	}
	return out
}

const absent = -1000

func TestWeight(t *testing.T) {
	for _, tt := range []struct {
		w    int
		want uint64
	}{{absent, 1}, {1, 1}, {7, 7}, {0, 0}, {-3, 0}, {1 << 40, maxWeight}} {
		if got := weight(weighted(tt.w)[0].Endpoint); got != tt.want {
			t.Errorf("weight(%d) = %d, want %d", tt.w, got, tt.want)
		}
	}
}

// TestC11_WeightedDrawProportionalToWeight: each request samples an
// endpoint with probability proportional to its positive weight (within
// five standard deviations, seeded); weights ≤ 0 get nothing; an endpoint
// without a weight weighs 1; there is no fixed repeating sequence; with
// every weight ≤ 0 it is round robin.
func TestC11_WeightedDrawProportionalToWeight(t *testing.T) {
	const trials = 40000
	tests := []struct {
		name    string
		weights []int
		want    []float64 // probability of being the primary
	}{
		{name: "3 to 1", weights: []int{3, 1}, want: []float64{0.75, 0.25}},
		{name: "absent weighs 1", weights: []int{absent, 1, 2}, want: []float64{0.25, 0.25, 0.5}},
		{name: "zero and negative get nothing", weights: []int{0, 5, -2, 5}, want: []float64{0, 0.5, 0, 0.5}},
		{name: "large and small", weights: []int{1000000, 1}, want: []float64{1000000. / 1000001, 1. / 1000001}},
		{name: "one positive", weights: []int{0, 0, 2}, want: []float64{0, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, 1)
			scored := weighted(tt.weights...)
			counts := make([]int, len(scored))
			for range trials {
				res := p.Pick(t.Context(), nil, scored)
				counts[indexOf(scored, res.Targets[0])]++
			}
			for i, prob := range tt.want {
				if prob == 0 {
					if counts[i] != 0 {
						t.Errorf("ep-%d (weight %d) got %d picks, want none", i, tt.weights[i], counts[i])
					}
					continue
				}
				schedulingtest.WithinBinomial(t, scored[i].Endpoint.Name(), counts[i], trials, prob)
			}
		})
	}

	t.Run("no fixed sequence", func(t *testing.T) {
		// A classic weighted round robin sends 3, 3, 3, 1: every block of
		// four holds exactly one request for the weight-1 endpoint. The
		// draw does not.
		p := newPicker(t, 1)
		scored := weighted(3, 1)
		blocks := map[int]int{}
		for range 1000 {
			small := 0
			for range 4 {
				if p.Pick(t.Context(), nil, scored).Targets[0].Name() == "ep-1" {
					small++
				}
			}
			blocks[small]++
		}
		if blocks[1] == 1000 || len(blocks) < 3 {
			t.Errorf("blocks of four by picks of the weight-1 endpoint: %v; want a varying count", blocks)
		}
	})

	t.Run("every weight zero is round robin", func(t *testing.T) {
		p := newPicker(t, 1)
		scored := weighted(0, 0, -1)
		var got []string
		for range 6 {
			got = append(got, p.Pick(t.Context(), nil, scored).Targets[0].Name())
		}
		if want := "ep-0 ep-1 ep-2 ep-0 ep-1 ep-2"; strings.Join(got, " ") != want {
			t.Errorf("picks = %v, want %s", got, want)
		}
	})

	t.Run("seeded", func(t *testing.T) {
		seq := func() string {
			p := newPicker(t, 1)
			scored := weighted(2, 3, 5)
			var b strings.Builder
			for range 50 {
				b.WriteString(p.Pick(t.Context(), nil, scored).Targets[0].Name())
			}
			return b.String()
		}
		if seq() != seq() {
			t.Error("two pickers on handles with the same seed draw different sequences")
		}
	})
}

func indexOf(scored []scheduling.ScoredEndpoint, e *scheduling.Endpoint) int {
	for i := range scored {
		if scored[i].Endpoint == e {
			return i
		}
	}
	return -1
}

// Fallbacks are drawn without replacement by weight and never include a
// zero-weight endpoint.
func TestPickFallbacks(t *testing.T) {
	const trials = 30000
	p := newPicker(t, 3)
	scored := weighted(1, 3, 0)
	pairs := map[string]int{}
	for range trials {
		names := schedulingtest.Names(p.Pick(t.Context(), nil, scored).Targets)
		if len(names) != 2 {
			t.Fatalf("targets = %v, want the two positive-weight endpoints", names)
		}
		pairs[strings.Join(names, ",")]++
	}
	schedulingtest.WithinBinomial(t, "ep-1 first", pairs["ep-1,ep-0"], trials, 0.75)
	schedulingtest.WithinBinomial(t, "ep-0 first", pairs["ep-0,ep-1"], trials, 0.25)

	// All zero: round robin, fallbacks in order.
	p = newPicker(t, 2)
	if got := schedulingtest.Names(p.Pick(t.Context(), nil, weighted(0, 0, 0)).Targets); strings.Join(got, ",") != "ep-0,ep-1" {
		t.Errorf("all-zero fallbacks = %v", got)
	}
	if res := p.Pick(t.Context(), nil, nil); len(res.Targets) != 0 {
		t.Errorf("no endpoints: %v", res.Targets)
	}
}

func TestPickAllocs(t *testing.T) {
	p := newPicker(t, 1)
	scored := weighted(1, 2, 3, 4)
	p.Pick(t.Context(), nil, scored) // warm the pool
	if n := testing.AllocsPerRun(100, func() { p.Pick(t.Context(), nil, scored) }); n > 1 {
		t.Errorf("Pick allocates %v times, want at most 1", n)
	}
}

// TestFallbacksOnlyNotAPick: a call that only orders the fallbacks (the
// strategy-picker's scorers chose the primary) returns the order the next
// pick would take and does not advance the rotation, so interleaving such
// calls leaves the picks' sequence unchanged.
func TestFallbacksOnlyNotAPick(t *testing.T) {
	scored := weighted(0, 0, 0)
	plain, mixed := newPicker(t, 2), newPicker(t, 2)
	fb := scheduling.PickInfo{FallbacksOnly: true}
	for i := range 5 {
		want := strings.Join(schedulingtest.Names(plain.PickInProfile(t.Context(), nil, scored, scheduling.PickInfo{}).Targets), ",")
		peek := strings.Join(schedulingtest.Names(mixed.PickInProfile(t.Context(), nil, scored, fb).Targets), ",")
		mixed.PickInProfile(t.Context(), nil, scored, fb)
		got := strings.Join(schedulingtest.Names(mixed.PickInProfile(t.Context(), nil, scored, scheduling.PickInfo{}).Targets), ",")
		if got != want || peek != want {
			t.Fatalf("pick %d: %s after fallbacks-only calls (which ordered %s), want %s", i, got, peek, want)
		}
	}
}
