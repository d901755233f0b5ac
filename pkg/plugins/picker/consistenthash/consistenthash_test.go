package consistenthash

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/picktest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	cases := append(picktest.FactoryCases(),
		schedulingtest.FactoryCase{Name: "default virtual nodes", Check: wantVNodes(150)},
		schedulingtest.FactoryCase{Name: "virtual nodes", Params: `{"virtualNodes": 7}`, Check: wantVNodes(7)},
		schedulingtest.FactoryCase{Name: "both", Params: `{"virtualNodes": 1000, "maxNumOfEndpoints": 2}`, Check: wantVNodes(1000)},
		schedulingtest.FactoryCase{Name: "zero virtual nodes", Params: `{"virtualNodes": 0}`, WantErr: "virtualNodes: must be 1..1000, got 0"},
		schedulingtest.FactoryCase{Name: "too many virtual nodes", Params: `{"virtualNodes": 1001}`, WantErr: "virtualNodes: must be 1..1000, got 1001"},
		schedulingtest.FactoryCase{Name: "every problem", Params: `{"virtualNodes": -1, "maxNumOfEndpoints": 0}`,
			WantErrs: []string{"virtualNodes: must be 1..1000, got -1", "maxNumOfEndpoints: must be >= 1, got 0"}},
		schedulingtest.FactoryCase{Name: "wrong type", Params: `{"virtualNodes": "many"}`, WantErr: "virtualNodes: expected an integer"},
	)
	schedulingtest.RunFactoryCases(t, Registration, cases)
}

func wantVNodes(n int) func(*testing.T, scheduling.Plugin) {
	return func(t *testing.T, p scheduling.Plugin) {
		t.Helper()
		if got := p.(*Picker).vnodes; got != n {
			t.Errorf("virtual nodes = %d, want %d", got, n)
		}
	}
}

func TestNew(t *testing.T) {
	if _, err := New("x", Params{Params: DefaultParams().Params}, schedulingtest.NewHandle(t)); err == nil {
		t.Error("New accepted virtualNodes 0")
	}
	if _, err := New("x", DefaultParams(), nil); err == nil {
		t.Error("New accepted a nil handle")
	}
	h := schedulingtest.NewHandle(t)
	if _, err := Registration.Factory("p", nil, h); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Params("p"); got != DefaultParams() {
		t.Errorf("effective parameters = %+v, want the defaults", got)
	}
}

func newPicker(t testing.TB, max, vnodes int) *Picker {
	t.Helper()
	params := DefaultParams()
	params.MaxNumOfEndpoints, params.VirtualNodes = max, vnodes
	p, err := New(Type, params, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pool returns scored endpoints named name-0 … name-(n-1).
func pool(names ...string) []scheduling.ScoredEndpoint {
	out := make([]scheduling.ScoredEndpoint, len(names))
	for i, n := range names {
		out[i] = scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint(n).Build(), Score: rand.Float64()}
	}
	return out
}

func named(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func req(model string) *scheduling.Request {
	return &scheduling.Request{Model: "alias-of-" + model, TargetModel: model}
}

// assign maps each model to the endpoint the picker chooses.
func assign(t *testing.T, p *Picker, scored []scheduling.ScoredEndpoint, models []string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(models))
	for _, m := range models {
		out[m] = p.Pick(t.Context(), req(m), scored).Targets[0].Name()
	}
	return out
}

func TestModelKey(t *testing.T) {
	if ModelKey(nil) != "" || ModelKey(&scheduling.Request{Model: "a"}) != "a" || ModelKey(&scheduling.Request{Model: "a", TargetModel: "b"}) != "b" {
		t.Error("ModelKey: want TargetModel, else Model, else empty")
	}
}

// TestC14_SameModelSameSetSameEndpoint: the resolved model name is hashed
// onto a ring of the candidates: the same model over the same candidate
// set gets the same endpoint, in any order of the candidates and from any
// picker instance (replicas agree); different models spread over the set;
// adding or removing one endpoint remaps only the models that hashed to
// it, about 1/N of them.
func TestC14_SameModelSameSetSameEndpoint(t *testing.T) {
	const n = 10
	models := named("model", 20000)
	base := pool(named("ep", n)...)
	p := newPicker(t, 1, DefaultVirtualNodes)
	before := assign(t, p, base, models)

	t.Run("stable", func(t *testing.T) {
		shuffled := slices.Clone(base)
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		other := newPicker(t, 1, DefaultVirtualNodes) // another replica
		for _, m := range models[:2000] {
			want := before[m]
			if got := p.Pick(t.Context(), req(m), base).Targets[0].Name(); got != want {
				t.Fatalf("%s: %s, then %s", m, want, got)
			}
			if got := other.Pick(t.Context(), req(m), shuffled).Targets[0].Name(); got != want {
				t.Fatalf("%s: %s, but %s from another instance over the shuffled set", m, want, got)
			}
		}
		// The resolved model decides, not the name the client used.
		if p.Pick(t.Context(), &scheduling.Request{Model: "x", TargetModel: "model-3"}, base).Targets[0].Name() != before["model-3"] {
			t.Error("the target model does not decide")
		}
	})

	t.Run("spread", func(t *testing.T) {
		counts := map[string]int{}
		for _, e := range before {
			counts[e]++
		}
		for _, name := range named("ep", n) {
			share := float64(counts[name]) / float64(len(models))
			if share < 0.5/n || share > 1.5/n {
				t.Errorf("%s holds %.3f of the models, want about %.3f", name, share, 1./n)
			}
		}
	})

	t.Run("remove one", func(t *testing.T) {
		lo, hi := 1.0, 0.0
		defer func() { t.Logf("moved fraction when removing one of %d: %.4f..%.4f (1/%d = %.4f)", n, lo, hi, n, 1./n) }()
		for gone := range n {
			rest := slices.Delete(slices.Clone(base), gone, gone+1)
			after := assign(t, p, rest, models)
			moved := 0
			for _, m := range models {
				if after[m] == before[m] {
					continue
				}
				moved++
				if before[m] != base[gone].Endpoint.Name() {
					t.Fatalf("removing %s moved %s from %s to %s", base[gone].Endpoint.Name(), m, before[m], after[m])
				}
			}
			lo, hi = min(lo, f(moved, len(models))), max(hi, f(moved, len(models)))
			if f := float64(moved) / float64(len(models)); f < 0.5/n || f > 1.5/n {
				t.Errorf("removing %s moved %.3f of the models, want about 1/%d", base[gone].Endpoint.Name(), f, n)
			}
		}
	})

	t.Run("add one", func(t *testing.T) {
		grown := append(slices.Clone(base), pool("new")...)
		after := assign(t, p, grown, models)
		moved := 0
		for _, m := range models {
			if after[m] != before[m] {
				moved++
				if after[m] != "new" {
					t.Fatalf("adding an endpoint moved %s from %s to %s", m, before[m], after[m])
				}
			}
		}
		if f := float64(moved) / float64(len(models)); f < 0.5/(n+1) || f > 1.5/(n+1) {
			t.Errorf("adding one moved %.3f of the models, want about 1/%d", f, n+1)
		}
		t.Logf("moved fraction when adding the 11th endpoint: %.4f (1/11 = %.4f)", f(moved, len(models)), 1./11)
	})
}

func f(a, b int) float64 { return float64(a) / float64(b) }

func TestPickFallbacks(t *testing.T) {
	p := newPicker(t, 3, 50)
	scored := pool(named("ep", 5)...)
	for _, m := range named("m", 200) {
		got := schedulingtest.Names(p.Pick(t.Context(), req(m), scored).Targets)
		if len(got) != 3 || len(slices.Compact(slices.Sorted(slices.Values(got)))) != 3 {
			t.Fatalf("%s: targets %v, want three distinct", m, got)
		}
		// The primary is the single-target pick; the fallbacks are stable.
		one := newPicker(t, 1, 50)
		if first := one.Pick(t.Context(), req(m), scored).Targets[0].Name(); first != got[0] {
			t.Fatalf("%s: primary %s, single pick %s", m, got[0], first)
		}
		if again := schedulingtest.Names(p.Pick(t.Context(), req(m), scored).Targets); strings.Join(again, ",") != strings.Join(got, ",") {
			t.Fatalf("%s: %v then %v", m, got, again)
		}
	}
	// Fewer candidates than wanted.
	if got := p.Pick(t.Context(), req("x"), scored[:2]).Targets; len(got) != 2 {
		t.Errorf("two candidates: %v", schedulingtest.Names(got))
	}
	if got := p.Pick(t.Context(), req("x"), scored[:1]).Targets; len(got) != 1 || got[0] != scored[0].Endpoint {
		t.Errorf("one candidate: %v", schedulingtest.Names(got))
	}
	if got := p.Pick(t.Context(), req("x"), nil).Targets; len(got) != 0 {
		t.Errorf("no candidates: %v", schedulingtest.Names(got))
	}
}

// One ring over the pool: a stable set builds once; subsets of it
// (filters that vary per request), a reordered set and a new snapshot of
// the same endpoints build nothing more; a new endpoint rebuilds once.
func TestRingOverThePool(t *testing.T) {
	p := newPicker(t, 1, 20)
	all := pool(named("a", 12)...)
	for i := range 1000 {
		p.Pick(t.Context(), req(fmt.Sprint(i)), all)
	}
	if got := p.rings.Builds(); got != 1 {
		t.Fatalf("builds after 1000 picks over one set = %d, want 1", got)
	}
	names := named("a", 12)
	slices.Reverse(names)
	reordered := pool(names...)
	for s := range 40 { // 40 distinct subsets, more than any per-subset cache held
		var sub []scheduling.ScoredEndpoint
		for i, e := range all {
			if (i*7+s)%5 != 0 || i == s%12 {
				sub = append(sub, e)
			}
		}
		p.Pick(t.Context(), req(fmt.Sprint(s)), sub)
		p.Pick(t.Context(), req(fmt.Sprint(s)), reordered)
	}
	if got := p.rings.Builds(); got != 1 {
		t.Fatalf("builds after 40 subsets and a reordered snapshot = %d, want 1", got)
	}
	grown := append(slices.Clone(all), pool("new")...)
	for i := range 100 {
		p.Pick(t.Context(), req(fmt.Sprint(i)), grown)
		p.Pick(t.Context(), req(fmt.Sprint(i)), all)
	}
	if got, members := p.rings.Builds(), p.rings.Ring().Members(); got != 2 || members != 13 {
		t.Fatalf("after a new endpoint: builds %d, members %d; want 2, 13", got, members)
	}

	// Closed: the ring is dropped, but picks still work (requests of the
	// old configuration may still run) and give the same endpoint.
	want := p.Pick(t.Context(), req("m"), all).Targets[0]
	p.Close(scheduling.CloseInfo{})
	if got := p.Pick(t.Context(), req("m"), all).Targets[0]; got != want {
		t.Errorf("after Close: %s, want %s", got.Name(), want.Name())
	}
	if m := p.rings.Ring().Members(); m != 0 {
		t.Errorf("a ring of %d members is cached after Close", m)
	}
}

// TestC14_SupersetRingEqualsCandidateRing: walking the pool's ring and
// skipping the other endpoints gives exactly what a ring of the
// candidates alone gives (a fresh picker that has seen only them), for
// random subsets and orders, primary and fallbacks: the result depends on
// the model and the candidate set only, so replicas with different
// histories agree.
func TestC14_SupersetRingEqualsCandidateRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 14))
	all := pool(named("ep", 60)...)
	warm := newPicker(t, 3, 40)
	warm.Pick(t.Context(), req("m"), all)
	for trial := range 300 {
		k := 1 + rng.IntN(len(all))
		if trial%3 == 0 {
			k = 1 + rng.IntN(4) // sparse: a few of sixty
		}
		perm := rng.Perm(len(all))[:k]
		sub := make([]scheduling.ScoredEndpoint, k)
		for i, j := range perm {
			sub[i] = all[j]
		}
		fresh := newPicker(t, 3, 40)
		for _, m := range named("m", 20) {
			got := schedulingtest.Names(warm.Pick(t.Context(), req(m), sub).Targets)
			want := schedulingtest.Names(fresh.Pick(t.Context(), req(m), sub).Targets)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d, %d candidates, %s: pool ring %v, candidates' ring %v", trial, k, m, got, want)
			}
		}
	}
	if b := warm.rings.Builds(); b != 1 {
		t.Errorf("the pool's picker built %d rings, want 1", b)
	}
}

func TestPickConcurrent(t *testing.T) {
	p := newPicker(t, 2, 30)
	sets := [][]scheduling.ScoredEndpoint{pool(named("a", 8)...), pool(named("b", 5)...), pool(named("a", 7)...)}
	want := make([]map[string]string, len(sets))
	for i, s := range sets {
		want[i] = assign(t, newPicker(t, 2, 30), s, named("m", 30))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				s := (g + i) % len(sets)
				m := fmt.Sprintf("m-%d", i%30)
				if got := p.Pick(t.Context(), req(m), sets[s]).Targets[0].Name(); got != want[s][m] {
					t.Errorf("set %d, %s: %s, want %s", s, m, got, want[s][m])
					return
				}
			}
		})
	}
	wg.Wait()
}
