package prefix

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// produce runs Produce and returns the stored match.
func produce(t *testing.T, p *Producer, text []byte, candidates []*scheduling.Endpoint) *scheduling.PrefixMatch {
	t.Helper()
	req := newRequest("m", text)
	p.Produce(t.Context(), req, candidates)
	pm, ok := scheduling.PrefixMatchKey.Get(req)
	if !ok || pm == nil {
		t.Fatal("no PrefixMatch on the request")
	}
	return pm
}

// wantHits checks a match against the expected blocks per endpoint key,
// through every read path: Range, Len, MatchedBlocks and the scorer.
func wantHits(t *testing.T, pm *scheduling.PrefixMatch, eps []*scheduling.Endpoint, want map[string]int) {
	t.Helper()
	if got := hitMap(pm); len(got) != len(want) || pm.HitCount() != len(want) {
		t.Errorf("Range = %v (Len %d), want %v", got, pm.HitCount(), want)
	} else {
		for k, v := range want {
			if got[k] != v {
				t.Errorf("Range[%s] = %d, want %d", k, got[k], v)
			}
		}
	}
	scores := make([]float64, len(eps))
	req := &scheduling.Request{}
	scheduling.PrefixMatchKey.Set(req, pm)
	(&Scorer{}).Score(context.Background(), req, eps, scores)
	for i, e := range eps {
		if got := pm.MatchedBlocks(e); got != want[e.Key()] {
			t.Errorf("MatchedBlocks(%s) = %d, want %d", e.Key(), got, want[e.Key()])
		}
		if w := float64(want[e.Key()]) / float64(pm.TotalBlocks); math.Abs(scores[i]-w) > 1e-12 {
			t.Errorf("score of %s = %v, want %v", e.Key(), scores[i], w)
		}
	}
}

// TestStoredResultSurvivesRecycledIDs: a match stored on a request keeps
// answering as of when it was produced after its endpoints are pruned and
// their ids reused by new endpoints that hold the same blocks.
func TestStoredResultSurvivesRecycledIDs(t *testing.T) {
	for _, n := range []int{3, 20} { // few hits inline, and per-id
		t.Run(fmt.Sprintf("endpoints=%d", n), func(t *testing.T) {
			p := newProducer(t, `{"autoTune": false}`)
			eps := schedulingtest.Endpoints(n, nil)
			text := promptText(blocks("p", 6)...)
			want := map[string]int{}
			for i, e := range eps {
				// Endpoint i holds the first 1 + i%5 blocks.
				route(p, newRequest("m", text[:(1+i%5)*blockBytes]), eps, e)
				want[e.Key()] = 1 + i%5
			}
			before := produce(t, p, text, eps)
			wantHits(t, before, eps, want)

			// Prune every other endpoint and give its id to a fresh one
			// that holds the whole prompt.
			var fresh []*scheduling.Endpoint
			for i := 0; i < n; i += 2 {
				drop := eps[i].Key()
				if p.Prune(func(k string) bool { return k != drop }) != 1 {
					t.Fatalf("prune %s", drop)
				}
				f := schedulingtest.Endpoint(fmt.Sprintf("fresh-%d", i)).Build()
				route(p, newRequest("m", text), eps, f)
				if l := p.idx.endpoint(f.Key(), false); l == nil || l.id != uint32(i) {
					t.Fatalf("fresh endpoint did not take id %d", i)
				}
				fresh = append(fresh, f)
			}
			checkConsistent(t, p.idx)
			all := append(slices.Clone(eps), fresh...)
			// The old result is unchanged and credits no fresh endpoint.
			wantHits(t, before, all, want)

			// A new match sees the new owners.
			wantNow := map[string]int{}
			for i, e := range eps {
				if i%2 == 1 {
					wantNow[e.Key()] = want[e.Key()]
				}
			}
			for _, f := range fresh {
				wantNow[f.Key()] = 6
			}
			wantHits(t, produce(t, p, text, all), all, wantNow)
			wantHits(t, before, all, want)
		})
	}
}

// TestMatchDropsIDRecycledMidWalk recycles an id between the first block
// and the rest of a walk: the endpoint that held the first block goes, and
// a new endpoint holding the whole prompt takes its id. Read through the
// snapshot the walk started from, the new holdings would be credited to
// the old key; match must drop that id instead.
func TestMatchDropsIDRecycledMidWalk(t *testing.T) {
	for _, others := range []int{0, 20} { // few hits inline, and per-id
		t.Run(fmt.Sprintf("others=%d", others), func(t *testing.T) {
			x := newIndex()
			chain := []uint64{1, 2, 3, 4}
			x.add("old", chain[:1], 10, 0)
			for i := range others {
				x.add(fmt.Sprintf("other-%d", i), chain[:2], 10, 0)
			}
			oldID := x.endpoint("old", false).id
			x.afterFirstBlock = func() {
				x.afterFirstBlock = nil
				x.remove("old")
				x.add("new", chain, 10, 0)
				if x.endpoint("new", false).id != oldID {
					t.Fatal("the new endpoint did not take the old id")
				}
			}
			h, ok := x.match(chain)
			if x.afterFirstBlock != nil {
				t.Fatal("the hook did not run")
			}
			got := map[string]int{}
			if ok {
				got = hitMap(&scheduling.PrefixMatch{TotalBlocks: len(chain), Hits: &h})
			}
			if b, ok := got["old"]; ok {
				t.Errorf("old credited with %d blocks after its id went to new", b)
			}
			if b, ok := got["new"]; ok {
				t.Errorf("new, registered after the walk began, credited with %d blocks", b)
			}
			if len(got) != others || h.Len() != others {
				t.Errorf("hits = %v (Len %d), want the %d others", got, h.Len(), others)
			}
			// The next match sees the new owner.
			if got := matchMap(x, chain); got["new"] != 4 || got["old"] != 0 {
				t.Errorf("next match = %v", got)
			}
		})
	}
}

// TestMatchDropsIDsRecycledDuringTheWalk is the concurrent version of
// TestMatchDropsIDRecycledMidWalk, mostly for the race detector: "old"
// endpoints hold the first block of a long prompt and "new" ones all of
// it, and every removal hands its id to the next endpoint of the other
// kind. A match that credited an old key with more than one block would
// have read a new endpoint's holdings through a recycled id.
func TestMatchDropsIDsRecycledDuringTheWalk(t *testing.T) {
	x := newIndex()
	chain := make([]uint64, 48) // long, so that churn often lands mid-walk
	for i := range chain {
		chain[i] = uint64(100 + i)
	}
	const pairs = 4
	const oldBlocks = 1
	for i := range pairs {
		x.add(fmt.Sprintf("old-%d-0", i), chain[:oldBlocks], 100, 0)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Go(func() {
			key := fmt.Sprintf("old-%d-0", i)
			for round := 1; !stop.Load(); round++ {
				x.remove(key)
				if round%2 == 1 {
					key = fmt.Sprintf("new-%d-%d", i, round)
					x.add(key, chain, 100, 0)
				} else {
					key = fmt.Sprintf("old-%d-%d", i, round)
					x.add(key, chain[:oldBlocks], 100, 0)
				}
			}
		})
	}
	matches := 0
	for range 20000 {
		h, ok := x.match(chain)
		if !ok {
			continue
		}
		matches++
		h.Range(func(k string, b int) bool {
			if strings.HasPrefix(k, "old-") && b > oldBlocks {
				t.Errorf("%s credited with %d blocks, it never held more than %d", k, b, oldBlocks)
			}
			return true
		})
		if t.Failed() {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	if matches == 0 {
		t.Error("no match ever hit")
	}
	checkConsistent(t, x)
}

// TestResultIsolatedFromLaterChanges: a stored match does not change when
// the index learns, evicts or forgets afterwards, nor when the pooled
// scratch is reused by later matches.
func TestResultIsolatedFromLaterChanges(t *testing.T) {
	for _, n := range []int{2, 30} {
		t.Run(fmt.Sprintf("endpoints=%d", n), func(t *testing.T) {
			p := newProducer(t, `{"autoTune": false, "lruCapacityPerServer": 8}`)
			eps := schedulingtest.Endpoints(n, nil)
			text := promptText(blocks("p", 4)...)
			want := map[string]int{}
			for _, e := range eps {
				route(p, newRequest("m", text[:2*blockBytes]), eps, e)
				want[e.Key()] = 2
			}
			pm := produce(t, p, text, eps)
			wantHits(t, pm, eps, want)
			for _, e := range eps {
				route(p, newRequest("m", text), eps, e)                          // everyone learns all 4
				route(p, newRequest("m", promptText(blocks("q", 8)...)), eps, e) // then evicts them
			}
			p.Prune(func(k string) bool { return k != eps[0].Key() })
			_ = produce(t, p, promptText(blocks("q", 8)...), eps)
			wantHits(t, pm, eps, want)
		})
	}
}

// TestScoreEndpointLists scores a match against the lists a profile can
// hand the scorer: the candidates, a filtered subset, a reordered list,
// endpoints rebuilt with the same keys, and endpoints the index never saw.
func TestScoreEndpointLists(t *testing.T) {
	for _, n := range []int{5, 40} {
		t.Run(fmt.Sprintf("endpoints=%d", n), func(t *testing.T) {
			p := newProducer(t, `{"autoTune": false}`)
			eps := schedulingtest.Endpoints(n, nil)
			text := promptText(blocks("p", 8)...)
			want := map[string]int{}
			for i, e := range eps {
				if i%5 == 4 {
					continue // never routed to: not in the index
				}
				route(p, newRequest("m", text[:(1+i%7)*blockBytes]), eps, e)
				want[e.Key()] = 1 + i%7
			}
			pm := produce(t, p, text, eps)
			var odd, reversed []*scheduling.Endpoint
			for i, e := range eps {
				if i%2 == 1 {
					odd = append(odd, e)
				}
				reversed = append(reversed, eps[len(eps)-1-i])
			}
			rebuilt := schedulingtest.Endpoints(n, nil) // same keys, new pointers
			stranger := schedulingtest.Endpoint("stranger").Build()
			lists := map[string][]*scheduling.Endpoint{
				"candidates":     eps,
				"subset":         odd,
				"reversed":       reversed,
				"rebuilt":        rebuilt,
				"stranger first": append([]*scheduling.Endpoint{stranger}, eps...),
				"stranger last":  append(slices.Clone(eps), stranger),
				"duplicates":     append(slices.Clone(eps), eps...),
				"empty":          nil,
			}
			for name, list := range lists {
				t.Run(name, func(t *testing.T) {
					wantHits(t, pm, list, want)
				})
			}
		})
	}
}

// TestCandidateCache checks the resolution cache: reused for the same
// candidates, rebuilt (keeping ids) for endpoints rebuilt with the same
// keys, and rebuilt when an endpoint joins.
func TestCandidateCache(t *testing.T) {
	x := newIndex()
	eps := schedulingtest.Endpoints(4, nil)
	for _, e := range eps[:3] {
		x.add(e.Key(), []uint64{1}, 10, 0)
	}
	check := func(c *candidateIDs, list []*scheduling.Endpoint) {
		t.Helper()
		if !slices.Equal(c.eps, list) || c.table != x.ids.Load() {
			t.Fatal("resolution is for another list or table")
		}
		for i, e := range list {
			if c.ids[i] != c.table.lookup(e.Key()) {
				t.Errorf("id of %s = %d, want %d", e.Key(), c.ids[i], c.table.lookup(e.Key()))
			}
		}
	}
	c1 := x.candidates(x.ids.Load(), eps)
	check(c1, eps)
	if c1.ids[3] != -1 {
		t.Errorf("endpoint outside the index has id %d", c1.ids[3])
	}
	if x.candidates(x.ids.Load(), slices.Clone(eps)) != c1 {
		t.Error("same candidates in another slice were resolved again")
	}
	rebuilt := schedulingtest.Endpoints(4, nil)
	c2 := x.candidates(x.ids.Load(), rebuilt)
	check(c2, rebuilt)
	if c2 == c1 || x.cands.Load() != c2 {
		t.Error("rebuilt endpoints did not replace the cached resolution")
	}
	x.add(eps[3].Key(), []uint64{1}, 10, 0)
	c3 := x.candidates(x.ids.Load(), rebuilt)
	check(c3, rebuilt)
	if c3.ids[3] < 0 {
		t.Error("the new endpoint was not resolved")
	}
	// A request whose snapshot is already outdated does not evict the
	// current resolution.
	x.add("other", []uint64{1}, 10, 0)
	old := c3.table
	cur := x.candidates(x.ids.Load(), rebuilt)
	if x.candidates(old, eps) == cur || x.cands.Load() != cur {
		t.Error("a resolution for an outdated snapshot replaced the current one")
	}
}

// TestScoreForeignHits: the scorer reads hits from another producer
// through the PrefixHits interface.
func TestScoreForeignHits(t *testing.T) {
	eps := schedulingtest.Endpoints(3, nil)
	req := &scheduling.Request{}
	scheduling.PrefixMatchKey.Set(req, &scheduling.PrefixMatch{TotalBlocks: 4, Hits: scheduling.PrefixHitMap{eps[1].Key(): 2, "elsewhere": 4}})
	scores := make([]float64, 3)
	newScorer(t, "").Score(t.Context(), req, eps, scores)
	if !slices.Equal(scores, []float64{0, 0.5, 0}) {
		t.Errorf("scores = %v", scores)
	}
}

// TestProduceTwice: producing a request again before PreRequest replaces
// its match and reuses its hash buffer; PreRequest then learns once.
func TestProduceTwice(t *testing.T) {
	p := newProducer(t, `{"autoTune": false}`)
	eps := schedulingtest.Endpoints(2, nil)
	req := newRequest("m", promptText(blocks("p", 4)...))
	p.Produce(t.Context(), req, eps)
	first, _ := p.hashesKey.Get(req)
	p.Produce(t.Context(), req, eps)
	if second, _ := p.hashesKey.Get(req); second != first {
		t.Error("the second Produce took another hash buffer")
	}
	p.PreRequest(t.Context(), req, resultFor(eps[0]))
	if p.IndexSize() != 4 {
		t.Errorf("IndexSize = %d, want 4", p.IndexSize())
	}
	wantHits(t, produce(t, p, promptText(blocks("p", 4)...), eps), eps, map[string]int{eps[0].Key(): 4})
}
