package leastbusy

import (
	"strings"
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

const noLoad = -1

// busy returns scored endpoints with the given in-flight counts (noLoad:
// no load data) and their loads; scores descend, and must not matter.
func busy(counts ...int64) ([]scheduling.ScoredEndpoint, []*schedulingtest.FakeLoad) {
	loads := make([]*schedulingtest.FakeLoad, len(counts))
	eps := schedulingtest.Endpoints(len(counts), func(i int, b *schedulingtest.EndpointBuilder) {
		if counts[i] != noLoad {
			loads[i] = schedulingtest.NewFakeLoad(counts[i], time.Duration(i+1)*time.Millisecond)
			b.Load(loads[i])
		}
	})
	out := make([]scheduling.ScoredEndpoint, len(eps))
	for i, e := range eps {
		out[i] = scheduling.ScoredEndpoint{Endpoint: e, Score: float64(len(eps) - i)}
	}
	return out, loads
}

func TestPick(t *testing.T) {
	tests := []struct {
		name   string
		counts []int64
		max    int
		picks  int
		want   string
	}{
		{name: "no endpoints", counts: nil, max: 1, picks: 1, want: ""},
		{name: "fewest in flight", counts: []int64{3, 1, 2}, max: 1, picks: 3, want: "ep-1 ep-1 ep-1"},
		{name: "ties rotate", counts: []int64{2, 0, 5, 0}, max: 1, picks: 4, want: "ep-1 ep-3 ep-1 ep-3"},
		{name: "all idle rotate", counts: []int64{0, 0, 0}, max: 1, picks: 4, want: "ep-0 ep-1 ep-2 ep-0"},
		{name: "never routed to counts as idle", counts: []int64{1, noLoad, 1}, max: 1, picks: 2, want: "ep-1 ep-1"},
		{name: "negative counts as idle", counts: []int64{1, -4, 0}, max: 1, picks: 2, want: "ep-1 ep-2"},
		{name: "fallbacks by count", counts: []int64{3, 1, 2}, max: 3, picks: 1, want: "ep-1,ep-2,ep-0"},
		{name: "fallback ties rotate", counts: []int64{1, 0, 1, 1}, max: 3, picks: 2, want: "ep-1,ep-0,ep-2 ep-1,ep-2,ep-3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, tt.max)
			scored, _ := busy(tt.counts...)
			var got []string
			for range tt.picks {
				got = append(got, strings.Join(schedulingtest.Names(p.Pick(t.Context(), nil, scored).Targets), ","))
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("picks = %q, want %q", strings.Join(got, " "), tt.want)
			}
		})
	}
}

// TestC22_LeastBusyUsesOwnInFlightAndRotatesTies: the picker reads the
// EPP's own in-flight counters (live: a request that starts or finishes
// changes the next pick), sends each request to the least busy candidate,
// rotates ties (all idle included) evenly, and treats an endpoint never
// routed to as idle.
func TestC22_LeastBusyUsesOwnInFlightAndRotatesTies(t *testing.T) {
	scored, loads := busy(0, 0, 0, noLoad)
	p := newPicker(t, 1)
	// Simulate the host: each pick starts a request there. With all idle the
	// picks rotate, so four requests land one on each endpoint.
	started := map[string]int{}
	for range 4 {
		e := p.Pick(t.Context(), nil, scored).Targets[0]
		started[e.Name()]++
		for i := range scored {
			if scored[i].Endpoint == e && loads[i] != nil {
				loads[i].InFlightN.Add(1)
			}
		}
	}
	for _, name := range []string{"ep-0", "ep-1", "ep-2", "ep-3"} {
		if started[name] != 1 {
			t.Fatalf("all idle: %v; want one request on each endpoint", started)
		}
	}
	// ep-3 has no load data (never routed to through the store): it stays
	// idle and gets the next requests while the others are busy.
	for range 3 {
		if got := p.Pick(t.Context(), nil, scored).Targets[0].Name(); got != "ep-3" {
			t.Fatalf("pick = %s, want the idle ep-3", got)
		}
	}
	// A request finishing on ep-1 makes it idle: it ties with ep-3, and the
	// two alternate.
	loads[1].InFlightN.Add(-1)
	counts := map[string]int{}
	for range 100 {
		counts[p.Pick(t.Context(), nil, scored).Targets[0].Name()]++
	}
	if counts["ep-1"] != 50 || counts["ep-3"] != 50 {
		t.Errorf("ties between ep-1 and ep-3: %v; want 50 each", counts)
	}
	// Load far apart: always the least busy.
	scored, _ = busy(40, 7, 12, 9)
	for range 10 {
		if got := p.Pick(t.Context(), nil, scored).Targets[0].Name(); got != "ep-1" {
			t.Fatalf("pick = %s, want ep-1 (7 in flight)", got)
		}
	}
}

// TestFallbacksOnlyNotAPick: a call that only orders the fallbacks (the
// strategy-picker's scorers chose the primary) returns the order the next
// pick would take and does not advance the rotation, so interleaving such
// calls leaves the picks' sequence unchanged.
func TestFallbacksOnlyNotAPick(t *testing.T) {
	scored := func() []scheduling.ScoredEndpoint { s, _ := busy(1, 0, 0, 0); return s }()
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
