package nohitlru

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
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

func TestParams(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantSize int
		wantErrs []string
	}{
		{name: "no parameters", raw: "", wantSize: 1024},
		{name: "null", raw: "null", wantSize: 1024},
		{name: "empty object", raw: "{}", wantSize: 1024},
		{name: "llm-d keys", raw: `{"prefixPluginType": "prefix-cache-scorer", "prefixPluginName": "my-prefix", "lruSize": 16}`, wantSize: 16},
		{name: "lruSize 0", raw: `{"lruSize": 0}`, wantErrs: []string{"lruSize: must be > 0, got 0"}},
		{name: "negative lruSize", raw: `{"lruSize": -3}`, wantErrs: []string{"lruSize: must be > 0, got -3"}},
		{name: "unknown key", raw: `{"size": 3}`, wantErrs: []string{`unknown field "size"`}},
		{name: "llm-d producer name is not supported", raw: `{"prefixMatchInfoProducerName": "p"}`, wantErrs: []string{`unknown field "prefixMatchInfoProducerName"`}},
		{name: "wrong type", raw: `{"lruSize": "big"}`, wantErrs: []string{"lruSize: expected an integer"}},
		{name: "wrong type for a name", raw: `{"prefixPluginName": 3}`, wantErrs: []string{"prefixPluginName: expected a string"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw json.RawMessage
			if tt.raw != "" {
				raw = json.RawMessage(tt.raw)
			}
			pl, err := Registration.Factory("lru", raw, schedulingtest.NewHandle(t))
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErrs)
				}
				if got := len(scheduling.Errors(err)); got != len(tt.wantErrs) {
					t.Errorf("got %d errors (%v), want %d", got, err, len(tt.wantErrs))
				}
				for _, w := range tt.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			s := pl.(*Scorer)
			if s.lru.cap != tt.wantSize {
				t.Errorf("lruSize = %d, want %d", s.lru.cap, tt.wantSize)
			}
			if s.TypedName() != (scheduling.TypedName{Type: Type, Name: "lru"}) {
				t.Errorf("TypedName = %v", s.TypedName())
			}
		})
	}
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
