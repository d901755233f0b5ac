package nohitlru

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func newScorer(t testing.TB, raw string) *Scorer {
	t.Helper()
	var r json.RawMessage
	if raw != "" {
		r = json.RawMessage(raw)
	}
	pl, err := Registration.Factory("lru", r, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatalf("factory: %v", err)
	}
	return pl.(*Scorer)
}

// wantSize checks the scorer's LRU capacity.
func wantSize(n int) func(*testing.T, scheduling.Plugin) {
	return func(t *testing.T, p scheduling.Plugin) {
		if got := p.(*Scorer).lru.cap; got != n {
			t.Errorf("lruSize = %d, want %d", got, n)
		}
	}
}

func TestParams(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, []schedulingtest.FactoryCase{
		{Name: "no parameters", Params: "", Check: wantSize(1024)},
		{Name: "null", Params: "null", Check: wantSize(1024)},
		{Name: "empty object", Params: "{}", Check: wantSize(1024)},
		{Name: "llm-d keys", Params: `{"prefixPluginType": "prefix-cache-scorer", "prefixPluginName": "my-prefix", "lruSize": 16}`, Check: wantSize(16)},
		{Name: "largest lruSize", Params: `{"lruSize": 1048576}`, Check: wantSize(MaxLRUSize)},
		{Name: "lruSize 0", Params: `{"lruSize": 0}`, WantErrs: []string{"lruSize: must be in [1, 1048576], got 0"}},
		{Name: "negative lruSize", Params: `{"lruSize": -3}`, WantErrs: []string{"lruSize: must be in [1, 1048576], got -3"}},
		{Name: "lruSize too large", Params: `{"lruSize": 1048577}`, WantErrs: []string{"lruSize: must be in [1, 1048576], got 1048577"}},
		{Name: "lruSize that would overflow", Params: `{"lruSize": 9223372036854775807}`, WantErrs: []string{"lruSize: must be in [1, 1048576], got 9223372036854775807"}},
		{Name: "unknown key", Params: `{"size": 3}`, WantErrs: []string{`unknown field "size"`}},
		{Name: "llm-d producer name is not supported", Params: `{"prefixMatchInfoProducerName": "p"}`, WantErrs: []string{`unknown field "prefixMatchInfoProducerName"`}},
		{Name: "wrong type", Params: `{"lruSize": "big"}`, WantErrs: []string{"lruSize: expected an integer"}},
		{Name: "wrong type for a name", Params: `{"prefixPluginName": 3}`, WantErrs: []string{"prefixPluginName: expected a string"}},
	})
}

func TestNew(t *testing.T) {
	if _, err := New("x", Params{LRUSize: 0}, schedulingtest.NewHandle(t)); err == nil {
		t.Error("New accepted lruSize 0")
	}
	s, err := New("", DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.TypedName().Name != Type || s.Category() != scheduling.Distribution {
		t.Errorf("TypedName, Category = %v, %v", s.TypedName(), s.Category())
	}
	if got := s.Consumes(); !slices.Equal(got, []string{scheduling.PrefixMatchKey.Name()}) {
		t.Errorf("Consumes = %v", got)
	}
}

func TestDefaultProducer(t *testing.T) {
	s := newScorer(t, "")
	typ, params, ok := s.DefaultProducer(scheduling.PrefixMatchKey.Name())
	if !ok || typ != "approx-prefix-cache-producer" || params != nil {
		t.Errorf("DefaultProducer(prefix match) = %q, %q, %v; want approx-prefix-cache-producer, nil, true", typ, params, ok)
	}
	for _, key := range []string{scheduling.InFlightLoadKey.Name(), "", "something-else"} {
		if typ, params, ok := s.DefaultProducer(key); ok || typ != "" || params != nil {
			t.Errorf("DefaultProducer(%q) = %q, %q, %v; want nothing", key, typ, params, ok)
		}
	}
}

// request returns a request whose prefix match gives the listed endpoints
// a hit; with none, the match has no hit; with a nil map there is no match.
func request(hits scheduling.PrefixHitMap) *scheduling.Request {
	req := &scheduling.Request{}
	if hits != nil {
		scheduling.PrefixMatchKey.Set(req, &scheduling.PrefixMatch{TotalBlocks: 8, BlockSizeTokens: 16, Hits: hits})
	}
	return req
}

func resultFor(primary *scheduling.Endpoint) *scheduling.Result {
	return &scheduling.Result{ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: []*scheduling.Endpoint{primary}}}, PrimaryProfile: "default"}
}

// schedule scores a request and records the target, as the framework does.
func schedule(s *Scorer, req *scheduling.Request, eps []*scheduling.Endpoint, target *scheduling.Endpoint) []float64 {
	scores := make([]float64, len(eps))
	ctx := context.Background()
	s.Score(ctx, req, eps, scores)
	s.PreRequest(ctx, req, resultFor(target))
	return scores
}

func approxEqual(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Abs(x-y) < 1e-9 })
}

func TestScore(t *testing.T) {
	eps := schedulingtest.Endpoints(4, nil)
	third := 1.0 / 3
	tests := []struct {
		name    string
		lruSize int
		history []int // endpoints that received cold requests, oldest first
		hits    scheduling.PrefixHitMap
		n       int
		want    []float64
	}{
		{name: "warm request is neutral", hits: scheduling.PrefixHitMap{eps[1].Key(): 3}, n: 4, want: []float64{0.5, 0.5, 0.5, 0.5}},
		{name: "cold, nothing used yet: candidate order", hits: scheduling.PrefixHitMap{}, n: 4, want: []float64{1, 2 * third, third, 0}},
		{name: "no prefix data counts as cold", n: 4, want: []float64{1, 2 * third, third, 0}},
		{name: "a hit on a non-candidate is still cold", hits: scheduling.PrefixHitMap{"elsewhere": 5}, n: 4, want: []float64{1, 2 * third, third, 0}},
		{name: "never used first, then least recently used", history: []int{0, 2}, n: 4, want: []float64{third, 1, 0, 2 * third}},
		{name: "recency order", history: []int{3, 1, 0, 2}, n: 4, want: []float64{third, 2 * third, 0, 1}},
		{name: "repeat use moves to the back", history: []int{0, 1, 2, 3, 0}, n: 4, want: []float64{0, 1, 2 * third, third}},
		{name: "evicted endpoints count as never used", lruSize: 2, history: []int{0, 1, 2, 3}, n: 4, want: []float64{1, 2 * third, third, 0}},
		{name: "single candidate", history: []int{0}, n: 1, want: []float64{1}},
		{name: "single candidate, warm", hits: scheduling.PrefixHitMap{eps[0].Key(): 1}, n: 1, want: []float64{0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := ""
			if tt.lruSize > 0 {
				raw = fmt.Sprintf(`{"lruSize": %d}`, tt.lruSize)
			}
			s := newScorer(t, raw)
			for _, i := range tt.history {
				schedule(s, request(scheduling.PrefixHitMap{}), eps, eps[i])
			}
			got := make([]float64, tt.n)
			s.Score(t.Context(), request(tt.hits), eps[:tt.n], got)
			if !approxEqual(got, tt.want) {
				t.Errorf("scores = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPreRequest(t *testing.T) {
	eps := schedulingtest.Endpoints(3, nil)
	t.Run("warm requests are not recorded", func(t *testing.T) {
		s := newScorer(t, "")
		schedule(s, request(scheduling.PrefixHitMap{eps[0].Key(): 2}), eps, eps[0])
		if s.lru.len() != 0 {
			t.Errorf("LRU holds %d", s.lru.len())
		}
	})
	t.Run("without Score nothing is recorded", func(t *testing.T) {
		s := newScorer(t, "")
		s.PreRequest(t.Context(), request(nil), resultFor(eps[0]))
		if s.lru.len() != 0 {
			t.Errorf("LRU holds %d", s.lru.len())
		}
	})
	t.Run("once per request", func(t *testing.T) {
		s := newScorer(t, "")
		req := request(nil)
		s.Score(t.Context(), req, eps, make([]float64, 3))
		s.PreRequest(t.Context(), req, resultFor(eps[0]))
		s.PreRequest(t.Context(), req, resultFor(eps[1]))
		if s.lru.len() != 1 {
			t.Errorf("LRU holds %d, want 1", s.lru.len())
		}
	})
	t.Run("prefill target recorded too", func(t *testing.T) {
		s := newScorer(t, "")
		req := request(nil)
		s.Score(t.Context(), req, eps, make([]float64, 3))
		s.PreRequest(t.Context(), req, &scheduling.Result{
			ProfileResults: map[string]*scheduling.ProfileResult{"decode": {Targets: eps[:1]}, "prefill": {Targets: eps[1:2]}},
			PrimaryProfile: "decode",
		})
		got := make([]float64, 3)
		s.Score(t.Context(), request(nil), eps, got)
		// ep-2 never used; ep-0 and ep-1 used, the prefill target last.
		if !approxEqual(got, []float64{0.5, 0, 1}) {
			t.Errorf("scores = %v", got)
		}
	})
	t.Run("no targets", func(t *testing.T) {
		s := newScorer(t, "")
		req := request(nil)
		s.Score(t.Context(), req, eps, make([]float64, 3))
		s.PreRequest(t.Context(), req, &scheduling.Result{ProfileResults: map[string]*scheduling.ProfileResult{"default": nil}, PrimaryProfile: "default"})
		if s.lru.len() != 0 {
			t.Errorf("LRU holds %d", s.lru.len())
		}
	})
}

func TestSortBySeq(t *testing.T) {
	tests := []struct {
		name string
		in   []use
	}{
		{name: "packed", in: []use{{index: 0, seq: 9}, {index: 1, seq: 2}, {index: 2, seq: 5}}},
		{name: "sequence numbers too large to pack", in: []use{{index: 0, seq: 1 << 62}, {index: 1, seq: 3}, {index: 2, seq: 1<<62 - 1}}},
		{name: "one", in: []use{{index: 4, seq: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Clone(tt.in)
			var keys []uint64
			sortBySeq(got, &keys)
			want := slices.Clone(tt.in)
			slices.SortFunc(want, func(a, b use) int {
				if a.seq < b.seq {
					return -1
				}
				return 1
			})
			if !slices.Equal(got, want) {
				t.Errorf("sorted = %v, want %v", got, want)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	s := newScorer(t, `{"lruSize": 8}`)
	eps := schedulingtest.Endpoints(20, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			scores := make([]float64, len(eps))
			for i := range 300 {
				var hits scheduling.PrefixHitMap
				if i%3 == 0 {
					hits = scheduling.PrefixHitMap{eps[(g+i)%len(eps)].Key(): 1}
				}
				req := request(hits)
				clear(scores)
				s.Score(t.Context(), req, eps, scores)
				best := 0
				for j, v := range scores {
					if v < 0 || v > 1 {
						t.Errorf("score %v out of range", v)
					}
					if v > scores[best] {
						best = j
					}
				}
				s.PreRequest(t.Context(), req, resultFor(eps[best]))
			}
		})
	}
	wg.Wait()
	if n := s.lru.len(); n > 8 {
		t.Errorf("LRU holds %d > lruSize 8", n)
	}
}

// remembered returns the keys the recency remembers, least recently used
// first.
func remembered(r *recency, eps []*scheduling.Endpoint) []string {
	used := r.lastUse(eps, nil)
	slices.SortFunc(used, func(a, b use) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]string, len(used))
	for i, u := range used {
		out[i] = eps[u.index].Key()
	}
	return out
}

// TestRecencyMatchesLRU replays random uses through the recency and through
// a plain LRU list: both remember the same keys in the same order.
func TestRecencyMatchesLRU(t *testing.T) {
	for _, capacity := range []int{1, 2, 5, 30, 100} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			eps := schedulingtest.Endpoints(40, nil)
			r := newRecency(capacity)
			var ref []string // least recently used first
			rng := rand.New(rand.NewPCG(uint64(capacity), 9))
			for i := range 2000 {
				k := eps[rng.IntN(len(eps))].Key()
				r.touch(k)
				ref = append(slices.DeleteFunc(ref, func(x string) bool { return x == k }), k)
				if len(ref) > capacity {
					ref = ref[1:]
				}
				if got := remembered(r, eps); !slices.Equal(got, ref) {
					t.Fatalf("after use %d of %s: remembered %v, want %v", i, k, got, ref)
				}
				if r.len() != len(ref) || r.live.Load() != int64(len(ref)) {
					t.Fatalf("after use %d: len, live = %d, %d; want %d", i, r.len(), r.live.Load(), len(ref))
				}
				if r.keys() > 2*capacity {
					t.Fatalf("after use %d: keeps %d keys > 2 × %d", i, r.keys(), capacity)
				}
			}
		})
	}
}

// TestRecencyKeepsRacingUse makes a use of an endpoint land on its slot
// between the scan that chose it as the least recently used and the
// compare-and-swap that forgets it: the use is not lost, and the next
// oldest is forgotten instead.
func TestRecencyKeepsRacingUse(t *testing.T) {
	eps := schedulingtest.Endpoints(3, nil)
	a, b, c := eps[0].Key(), eps[1].Key(), eps[2].Key()
	r := newRecency(2)
	r.touch(a)
	r.touch(b)
	r.afterScan = func(oldest *slot) {
		r.afterScan = nil
		if ok, _ := oldest.use(r.seq.Add(1)); !ok {
			t.Error("the slot chosen to be forgotten is gone")
		}
	}
	r.touch(c) // a is chosen, then used again: b goes
	if got, want := remembered(r, eps), []string{c, a}; !slices.Equal(got, want) {
		t.Errorf("remembered %v, want %v", got, want)
	}
	if r.len() != 2 || r.live.Load() != 2 {
		t.Errorf("len, live = %d, %d; want 2, 2", r.len(), r.live.Load())
	}
}

// TestRecencyRevives checks that a forgotten endpoint that comes back
// reuses its slot (no copy of the snapshot), and that keys beyond 2×lruSize
// are dropped and get a new slot when they come back.
func TestRecencyRevives(t *testing.T) {
	eps := schedulingtest.Endpoints(6, nil)
	k := func(i int) string { return eps[i].Key() }
	r := newRecency(2)
	r.touch(k(0))
	r.touch(k(1))
	r.touch(k(2)) // forgets 0
	before := r.snap.Load()
	r.touch(k(0)) // revives 0, forgets 1
	if r.snap.Load() != before {
		t.Error("reviving a forgotten endpoint copied the snapshot")
	}
	if got, want := remembered(r, eps), []string{k(2), k(0)}; !slices.Equal(got, want) {
		t.Errorf("remembered %v, want %v", got, want)
	}
	r.touch(k(3)) // four keys kept: 2 and 3 remembered, 0 and 1 forgotten
	if r.keys() != 4 {
		t.Fatalf("keeps %d keys, want 4", r.keys())
	}
	old := (*r.snap.Load())[k(1)]
	r.touch(k(4)) // 2×lruSize keys kept: the copy drops the forgotten ones
	if r.keys() != 3 {
		t.Errorf("keeps %d keys after compaction, want 3", r.keys())
	}
	if old.v.Load()&removed == 0 {
		t.Error("a dropped slot is not marked removed")
	}
	if ok, _ := old.use(r.seq.Add(1)); ok {
		t.Error("a removed slot took a use")
	}
	r.touch(k(1)) // comes back with a new slot
	if got, want := remembered(r, eps), []string{k(4), k(1)}; !slices.Equal(got, want) {
		t.Errorf("remembered %v, want %v", got, want)
	}
	if (*r.snap.Load())[k(1)] == old {
		t.Error("a removed slot was put back")
	}
}

// TestConcurrentRecency records from many goroutines: the bound holds up
// to the recordings under way, exactly once they are done, and a quiet
// period afterwards leaves exactly the last lruSize keys used.
func TestConcurrentRecency(t *testing.T) {
	const capacity = 6
	eps := schedulingtest.Endpoints(24, nil)
	r := newRecency(capacity)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				r.touch(eps[rng.IntN(len(eps))].Key())
				// A use that revives or adds a slot forgets the oldest
				// right after: with 8 recorders, at most 8 more for a
				// moment.
				if n := r.len(); n > capacity+8 {
					t.Errorf("remembers %d > %d + 8", n, capacity)
					return
				}
			}
		})
		wg.Go(func() {
			for range 500 {
				for _, u := range r.lastUse(eps, nil) {
					if u.seq&stateBits != 0 {
						t.Error("lastUse reported a forgotten or removed slot")
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if n := r.live.Load(); n != int64(r.len()) || n > capacity {
		t.Errorf("live = %d, remembered slots = %d, lruSize %d", n, r.len(), capacity)
	}
	if r.keys() > 2*capacity+8 {
		t.Errorf("keeps %d keys", r.keys())
	}
	var want []string
	for _, e := range eps[:capacity] {
		r.touch(e.Key())
		want = append(want, e.Key())
	}
	if got := remembered(r, eps); !slices.Equal(got, want) {
		t.Errorf("remembered %v, want %v", got, want)
	}
}
