package leastlatency

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

// ep describes one candidate's load: nil load means no load data.
type ep struct {
	noLoad   bool
	e2e      time.Duration
	inFlight int64
	errors   uint64
}

func candidates(eps ...ep) ([]scheduling.ScoredEndpoint, []*schedulingtest.FakeLoad) {
	loads := make([]*schedulingtest.FakeLoad, len(eps))
	built := schedulingtest.Endpoints(len(eps), func(i int, b *schedulingtest.EndpointBuilder) {
		if eps[i].noLoad {
			return
		}
		loads[i] = schedulingtest.NewFakeLoad(eps[i].inFlight, eps[i].e2e)
		loads[i].ErrorsN.Store(eps[i].errors)
		b.Load(loads[i])
	})
	out := make([]scheduling.ScoredEndpoint, len(built))
	for i, e := range built {
		out[i] = scheduling.ScoredEndpoint{Endpoint: e, Score: float64(len(built) - i)} // scores must not matter
	}
	return out, loads
}

func picks(t *testing.T, p *Picker, scored []scheduling.ScoredEndpoint, n int) string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, strings.Join(schedulingtest.Names(p.Pick(t.Context(), nil, scored).Targets), ","))
	}
	return strings.Join(out, " ")
}

const ms = time.Millisecond

func TestPick(t *testing.T) {
	tests := []struct {
		name  string
		eps   []ep
		max   int
		picks int
		want  string
	}{
		{name: "no endpoints", eps: nil, max: 1, picks: 1, want: ""},
		{name: "lowest latency", eps: []ep{{e2e: 300 * ms}, {e2e: 100 * ms}, {e2e: 200 * ms}}, max: 1, picks: 2, want: "ep-1 ep-1"},
		{name: "order of fallbacks", eps: []ep{{e2e: 300 * ms}, {e2e: 100 * ms}, {e2e: 200 * ms}}, max: 3, picks: 1, want: "ep-1,ep-2,ep-0"},
		{name: "unmeasured first, in turns", eps: []ep{{e2e: ms}, {}, {e2e: 2 * ms}, {noLoad: true}}, max: 1, picks: 4, want: "ep-1 ep-3 ep-1 ep-3"},
		{name: "unmeasured then measured", eps: []ep{{e2e: 5 * ms}, {}, {e2e: 2 * ms}}, max: 3, picks: 1, want: "ep-1,ep-2,ep-0"},
		{name: "equal latencies take turns", eps: []ep{{e2e: 9 * ms}, {e2e: 4 * ms}, {e2e: 4 * ms}}, max: 1, picks: 3, want: "ep-1 ep-2 ep-1"},
		{name: "probing waits for its measurement", eps: []ep{{inFlight: 1}, {e2e: 900 * ms}}, max: 2, picks: 1, want: "ep-1,ep-0"},
		{name: "failed only ranks last", eps: []ep{{errors: 3}, {inFlight: 2}, {e2e: time.Hour}}, max: 3, picks: 1, want: "ep-2,ep-1,ep-0"},
		{name: "all probing take turns", eps: []ep{{inFlight: 1}, {inFlight: 4}}, max: 1, picks: 3, want: "ep-0 ep-1 ep-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scored, _ := candidates(tt.eps...)
			if got := picks(t, newPicker(t, tt.max), scored, tt.picks); got != tt.want {
				t.Errorf("picks = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestC12_LeastLatencyUnmeasuredFirstSlowStaysEligible: the lowest
// observed mean latency wins; candidates with no measurement yet are
// picked first, in round-robin order, until they have one; a slow endpoint
// stays eligible: it is a fallback, and the pick again when the others
// become slower than it (the averages are read live).
func TestC12_LeastLatencyUnmeasuredFirstSlowStaysEligible(t *testing.T) {
	scored, loads := candidates(ep{}, ep{}, ep{e2e: 2 * time.Second})
	p := newPicker(t, 2)
	// Two new endpoints: they take turns while unmeasured, the measured one
	// (slow) is the fallback.
	if got := picks(t, p, scored, 2); got != "ep-0,ep-1 ep-1,ep-0" {
		t.Fatalf("unmeasured: picks = %q", got)
	}
	// Each gets its first measurement: fast ones.
	loads[0].E2ED.Store(int64(50 * ms))
	loads[1].E2ED.Store(int64(80 * ms))
	if got := picks(t, p, scored, 2); got != "ep-0,ep-1 ep-0,ep-1" {
		t.Fatalf("measured: picks = %q", got)
	}
	// The fast ones slow down under load (their averages rise above the slow
	// endpoint's): the slow endpoint is picked again.
	loads[0].E2ED.Store(int64(3 * time.Second))
	loads[1].E2ED.Store(int64(2500 * ms))
	if got := picks(t, p, scored, 1); got != "ep-2,ep-1" {
		t.Fatalf("slow endpoint: picks = %q, want it first now", got)
	}
	// With one candidate left (the filters removed the others), the slow
	// endpoint serves.
	if got := picks(t, p, scored[2:], 1); got != "ep-2" {
		t.Fatalf("only the slow endpoint: %q", got)
	}
}

func TestKeyClamp(t *testing.T) {
	scored, _ := candidates(ep{e2e: time.Duration(1<<63 - 1)})
	if k := key(scored[0].Endpoint); k >= keyProbing {
		t.Errorf("key of a huge latency = %d, want below the probing key", k)
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
