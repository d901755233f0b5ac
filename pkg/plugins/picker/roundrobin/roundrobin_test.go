package roundrobin

import (
	"strings"
	"sync"
	"testing"
	"time"

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

// picks returns the targets of successive picks, "a,b" per pick.
func picks(t *testing.T, p *Picker, scored []scheduling.ScoredEndpoint, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Join(schedulingtest.Names(p.Pick(t.Context(), nil, scored).Targets), ",")
	}
	return out
}

func TestPick(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		max   int
		picks int
		want  string
	}{
		{name: "no endpoints", n: 0, max: 1, picks: 2, want: " "},
		{name: "one endpoint", n: 1, max: 1, picks: 3, want: "ep-0 ep-0 ep-0"},
		{name: "walks the list in order and wraps", n: 3, max: 1, picks: 7, want: "ep-0 ep-1 ep-2 ep-0 ep-1 ep-2 ep-0"},
		{name: "fallbacks follow in order", n: 3, max: 2, picks: 4, want: "ep-0,ep-1 ep-1,ep-2 ep-2,ep-0 ep-0,ep-1"},
		{name: "never more than there are", n: 2, max: 5, picks: 2, want: "ep-0,ep-1 ep-1,ep-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(picks(t, newPicker(t, tt.max), schedulingtest.Scored(make([]float64, tt.n)...), tt.picks), " ")
			if got != tt.want {
				t.Errorf("picks = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestC10_RoundRobinIgnoresScoresWeightsAndLatency: an atomic counter
// walks the eligible candidates in their given order; scores, weights and
// latency change nothing, and concurrent requests share the turns evenly.
func TestC10_RoundRobinIgnoresScoresWeightsAndLatency(t *testing.T) {
	eps := schedulingtest.Endpoints(4, func(i int, b *schedulingtest.EndpointBuilder) {
		b.Weight([]int{10, 1, 0, 3}[i]).Load(schedulingtest.NewFakeLoad(int64(i*5), time.Duration(i+1)*time.Second))
	})
	scored := make([]scheduling.ScoredEndpoint, len(eps))
	for i, e := range eps {
		scored[i] = scheduling.ScoredEndpoint{Endpoint: e, Score: []float64{0.1, 9, 0, 3}[i]}
	}
	p := newPicker(t, 1)
	if got, want := strings.Join(picks(t, p, scored, 8), " "), "ep-0 ep-1 ep-2 ep-3 ep-0 ep-1 ep-2 ep-3"; got != want {
		t.Errorf("picks = %q, want %q", got, want)
	}

	// Eligibility narrows the list (a filter removed ep-1): the walk goes on
	// over what is left, in order.
	eligible := []scheduling.ScoredEndpoint{scored[0], scored[2], scored[3]}
	p = newPicker(t, 1)
	if got, want := strings.Join(picks(t, p, eligible, 6), " "), "ep-0 ep-2 ep-3 ep-0 ep-2 ep-3"; got != want {
		t.Errorf("picks over the eligible = %q, want %q", got, want)
	}

	// 8 goroutines × 300 picks: every endpoint gets exactly a quarter.
	p = newPicker(t, 1)
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		wg     sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			local := map[string]int{}
			for range 300 {
				local[p.Pick(t.Context(), nil, scored).Targets[0].Name()]++
			}
			mu.Lock()
			for k, v := range local {
				counts[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, e := range eps {
		if counts[e.Name()] != 600 {
			t.Errorf("%s got %d of 2400 picks, want exactly 600: %v", e.Name(), counts[e.Name()], counts)
		}
	}
}

// TestFallbacksOnlyNotAPick: a call that only orders the fallbacks (the
// strategy-picker's scorers chose the primary) returns the order the next
// pick would take and does not advance the rotation, so interleaving such
// calls leaves the picks' sequence unchanged.
func TestFallbacksOnlyNotAPick(t *testing.T) {
	scored := schedulingtest.Scored(0, 0, 0)
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
