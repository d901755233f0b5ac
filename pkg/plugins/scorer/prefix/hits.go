package prefix

import (
	"slices"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// fewHitsMax is the largest number of hits a result stores inline, as
// (id, blocks) pairs. Beyond it the result holds one int32 per endpoint id,
// which is what a prompt prefix held by many endpoints (a shared system
// prompt) needs anyway.
const fewHitsMax = 8

// idBlocks is one hit: an endpoint id and the leading blocks it holds.
type idBlocks struct {
	id, blocks int32
}

// prefixHits is the producer's scheduling.PrefixHits: the result of one
// match, in the ids of the snapshot the match read. It is never modified
// once stored on a request, and it does not refer to any pooled memory, so
// it stays valid for as long as a plugin holds it, whatever the index does
// meanwhile.
type prefixHits struct {
	// table is the id snapshot the ids refer to; keys resolve through it.
	table *idTable
	// cands resolves the request's candidates to ids in table, so that
	// scoring them needs no lookup by key. Nil when there were none.
	cands *candidateIDs
	// n is the number of endpoints with a hit.
	n int
	// dense holds the blocks per id when there are more than fewHitsMax
	// hits, 0 for an endpoint without a hit; nil otherwise.
	dense []int32
	// few holds the first n hits when dense is nil.
	few [fewHitsMax]idBlocks
	// fewMask has bit id%64 set for every id in few, so that most
	// endpoints without a hit are turned away without scanning few.
	fewMask uint64
}

// addFew appends a hit to few.
func (h *prefixHits) addFew(id, blocks int32) {
	h.few[h.n] = idBlocks{id: id, blocks: blocks}
	h.fewMask |= 1 << (uint(id) & 63)
	h.n++
}

// blocksOf returns the blocks held by the endpoint with an id in h.table,
// 0 for id -1.
func (h *prefixHits) blocksOf(id int32) int32 {
	if h.dense != nil {
		if uint(id) < uint(len(h.dense)) {
			return h.dense[id]
		}
		return 0
	}
	if id < 0 || h.fewMask&(1<<(uint(id)&63)) == 0 {
		return 0
	}
	for _, hit := range h.few[:h.n] {
		if hit.id == id {
			return hit.blocks
		}
	}
	return 0
}

// MatchedBlocks implements scheduling.PrefixHits with one map lookup.
func (h *prefixHits) MatchedBlocks(e *scheduling.Endpoint) int {
	return int(h.blocksOf(h.table.lookup(e.Key())))
}

// Len implements scheduling.PrefixHits.
func (h *prefixHits) Len() int { return h.n }

// Range implements scheduling.PrefixHits.
func (h *prefixHits) Range(f func(endpointKey string, blocks int) bool) {
	if h.dense == nil {
		for _, hit := range h.few[:h.n] {
			if !f(h.table.byID[hit.id].key, int(hit.blocks)) {
				return
			}
		}
		return
	}
	for id, b := range h.dense {
		if b > 0 && !f(h.table.byID[id].key, int(b)) {
			return
		}
	}
}

// scoreInto sets scores[i] to scale × the blocks endpoints[i] holds for
// every endpoint with a hit, and leaves the other scores alone.
//
// The endpoints are almost always the request's candidates, or an
// order-preserving subset of them left by filters, so a forward scan of the
// resolved candidates finds each endpoint by pointer. The first endpoint
// the scan misses ends it: that one and the rest are looked up by key,
// which bounds the cost at O(candidates + endpoints) whatever the order.
func (h *prefixHits) scoreInto(endpoints []*scheduling.Endpoint, scores []float64, scale float64) {
	var known []*scheduling.Endpoint
	var knownIDs []int32
	if h.cands != nil {
		known, knownIDs = h.cands.eps, h.cands.ids
	}
	next := 0
	for i, e := range endpoints {
		k := next
		for k < len(known) && known[k] != e {
			k++
		}
		var id int32
		if k < len(known) {
			id, next = knownIDs[k], k+1
		} else {
			known = nil
			id = h.table.lookup(e.Key())
		}
		if b := h.blocksOf(id); b > 0 {
			scores[i] = float64(b) * scale
		}
	}
}

// candidateIDs resolves one candidate list to endpoint ids in one id table.
// Resolving costs a map lookup by key per endpoint; the index caches the
// last resolution because a pool's candidate list rarely changes between
// requests, and checking that it did not costs a pointer comparison per
// endpoint. It is immutable once built.
type candidateIDs struct {
	table *idTable
	eps   []*scheduling.Endpoint
	ids   []int32 // id of eps[i] in table, -1 when it has none
}

// candidates returns the ids in t of the candidates, from the cache when
// the candidates and t are those it was built for. Otherwise it builds a
// resolution and caches it while t is the current snapshot: an older t
// belongs to a request that raced with a registration, and its resolution
// would only evict a newer one.
func (x *index) candidates(t *idTable, candidates []*scheduling.Endpoint) *candidateIDs {
	c := x.cands.Load()
	if c != nil && c.table == t && slices.Equal(c.eps, candidates) {
		return c
	}
	// Endpoint snapshots rebuilt with unchanged keys (a metrics refresh)
	// keep their ids: a string comparison is cheaper than a map lookup.
	reuse := c != nil && c.table == t
	next := &candidateIDs{table: t, eps: slices.Clone(candidates), ids: make([]int32, len(candidates))}
	for i, e := range candidates {
		if reuse && i < len(c.eps) && c.eps[i].Key() == e.Key() {
			next.ids[i] = c.ids[i]
			continue
		}
		next.ids[i] = t.lookup(e.Key())
	}
	if x.ids.Load() == t {
		x.cands.Store(next)
	}
	return next
}
