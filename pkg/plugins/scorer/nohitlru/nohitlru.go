// Package nohitlru implements llm-d's no-hit-lru-scorer. A request whose
// prompt has no prefix-cache hit on any candidate ("cold") builds new KV
// cache wherever it goes. This scorer sends such requests preferably to the
// endpoints that received a cold request least recently, which spreads new
// prefixes and cache growth over the pool. Requests with a hit ("warm") get
// a neutral score, and the affinity scorers decide for them.
package nohitlru

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "no-hit-lru-scorer"

// prefillProfile is the profile whose target is also recorded, as in llm-d
// (prefill/decode disaggregation).
const prefillProfile = "prefill"

// neutralScore is what every endpoint gets for a warm request.
const neutralScore = 0.5

// Params configures the scorer.
type Params struct {
	// PrefixPluginType is accepted for compatibility with llm-d
	// configurations and ignored (llm-d never used it either): the prefix
	// match comes from the well-known prefix-match data. Default
	// "prefix-cache-scorer".
	PrefixPluginType string `json:"prefixPluginType"`
	// PrefixPluginName is accepted for compatibility and ignored, like
	// prefixPluginType. Default "prefix-cache-scorer".
	PrefixPluginName string `json:"prefixPluginName"`
	// LRUSize is the number of endpoints whose last cold request is
	// remembered; older ones count as never used. > 0. Default 1024.
	LRUSize int `json:"lruSize"`
}

// DefaultParams returns llm-d's defaults.
func DefaultParams() Params {
	return Params{PrefixPluginType: "prefix-cache-scorer", PrefixPluginName: "prefix-cache-scorer", LRUSize: 1024}
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	if p.LRUSize <= 0 {
		errs = append(errs, fmt.Errorf("lruSize: must be > 0, got %d", p.LRUSize))
	}
	return errors.Join(errs...)
}

// Scorer is the no-hit-lru-scorer. It is safe for concurrent use.
type Scorer struct {
	typedName scheduling.TypedName
	coldKey   scheduling.StateKey[bool]
	lru       *recency
}

// New builds a no-hit-lru-scorer.
func New(name string, p Params, _ scheduling.Handle) (*Scorer, error) {
	if name == "" {
		name = Type
	}
	if p.LRUSize <= 0 {
		return nil, fmt.Errorf("lruSize: must be > 0, got %d", p.LRUSize)
	}
	return &Scorer{
		typedName: scheduling.TypedName{Type: Type, Name: name},
		coldKey:   scheduling.NewStateKey[bool](Type + "/" + name + "/cold"),
		lru:       newRecency(p.LRUSize),
	}, nil
}

// TypedName implements scheduling.Plugin.
func (s *Scorer) TypedName() scheduling.TypedName { return s.typedName }

// Category implements scheduling.Scorer. As in llm-d it spreads load.
func (s *Scorer) Category() scheduling.ScorerCategory { return scheduling.Distribution }

// Consumes implements scheduling.DataConsumer.
func (s *Scorer) Consumes() []string { return []string{scheduling.PrefixMatchKey.Name()} }

// Score implements scheduling.Scorer. Warm requests score 0.5 everywhere.
// For cold requests, endpoints that never received a cold request (among
// those remembered) rank first, in candidate order, then the others from
// least to most recently used; rank r of n scores 1 − r/(n−1). A single
// candidate scores 1.
func (s *Scorer) Score(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint, scores []float64) {
	cold := isCold(req, endpoints)
	s.coldKey.Set(req, cold)
	if !cold {
		for i := range scores {
			scores[i] = neutralScore
		}
		return
	}
	n := len(endpoints)
	if n == 1 {
		scores[0] = 1
		return
	}
	buf := scratchPool.Get().(*scratch)
	defer scratchPool.Put(buf)
	used := s.lru.lastUse(endpoints, buf.used[:0])
	buf.used = used
	step := 1 / float64(n-1)
	// Never-used endpoints first, in candidate order (used is in candidate
	// order too).
	rank, j := 0, 0
	for i := range endpoints {
		if j < len(used) && used[j].index == i {
			j++
			continue
		}
		scores[i] = 1 - float64(rank)*step
		rank++
	}
	// Then the used ones from the least recently used.
	sortBySeq(used, &buf.keys)
	for _, u := range used {
		scores[u.index] = max(0, 1-float64(rank)*step)
		rank++
	}
}

// sortBySeq sorts uses by ascending sequence number. Sequence numbers are
// unique; packing them with the index into one integer lets the sort run
// without a comparison callback.
func sortBySeq(used []use, keys *[]uint64) {
	const indexBits = 24
	if len(used) < 2 {
		return
	}
	if len(used) >= 1<<indexBits || !fitsPacked(used, indexBits) {
		slices.SortFunc(used, func(a, b use) int { return cmp.Compare(a.seq, b.seq) })
		return
	}
	k := (*keys)[:0]
	for _, u := range used {
		k = append(k, u.seq<<indexBits|uint64(u.index))
	}
	slices.Sort(k)
	for i, v := range k {
		used[i] = use{index: int(v & (1<<indexBits - 1)), seq: v >> indexBits}
	}
	*keys = k
}

// fitsPacked reports whether every sequence number fits the packed form.
func fitsPacked(used []use, indexBits uint) bool {
	for _, u := range used {
		if u.seq >= 1<<(64-indexBits) {
			return false
		}
	}
	return true
}

// isCold reports whether no candidate has a prefix-cache hit. A request
// without prefix-match data counts as cold, as in llm-d.
func isCold(req *scheduling.Request, endpoints []*scheduling.Endpoint) bool {
	pm, ok := scheduling.PrefixMatchKey.Get(req)
	if !ok || pm.HitCount() == 0 {
		return true
	}
	for _, e := range endpoints {
		if pm.MatchedBlocks(e) > 0 {
			return false
		}
	}
	return true
}

// PreRequest records the primary target (and the target of a profile
// named "prefill") as most recently used when the request was cold.
func (s *Scorer) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
	cold, ok := s.coldKey.Get(req)
	if !ok {
		return
	}
	s.coldKey.Delete(req)
	if !cold || result == nil {
		return
	}
	if t := result.Targets(); len(t) > 0 {
		s.lru.touch(t[0].Key())
	}
	if result.PrimaryProfile != prefillProfile {
		if pr := result.ProfileResults[prefillProfile]; pr != nil && len(pr.Targets) > 0 {
			s.lru.touch(pr.Targets[0].Key())
		}
	}
}

// use is a candidate's position and the sequence number of its last cold
// request.
type use struct {
	index int
	seq   uint64
}

type scratch struct {
	used []use
	keys []uint64
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

// recency is a bounded LRU of endpoint keys. Each entry carries the
// sequence number of its last use, so ranking candidates needs only a
// lookup per candidate, under a read lock.
type recency struct {
	mu      sync.RWMutex
	cap     int
	seq     uint64
	entries map[string]*recencyEntry
	// head is the most recently used entry, tail the least; the list is
	// doubly linked through prev and next.
	head, tail *recencyEntry
}

type recencyEntry struct {
	key        string
	seq        uint64
	prev, next *recencyEntry
}

func newRecency(capacity int) *recency {
	return &recency{cap: capacity, entries: make(map[string]*recencyEntry, min(capacity, 4096))}
}

// touch marks key as the most recently used, evicting the least recently
// used key beyond the capacity.
func (r *recency) touch(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	if e, ok := r.entries[key]; ok {
		e.seq = r.seq
		if e != r.head {
			r.unlink(e)
			r.pushFront(e)
		}
		return
	}
	if len(r.entries) >= r.cap {
		old := r.tail
		r.unlink(old)
		delete(r.entries, old.key)
	}
	e := &recencyEntry{key: key, seq: r.seq}
	r.entries[key] = e
	r.pushFront(e)
}

func (r *recency) unlink(e *recencyEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		r.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		r.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (r *recency) pushFront(e *recencyEntry) {
	e.next = r.head
	if r.head != nil {
		r.head.prev = e
	}
	r.head = e
	if r.tail == nil {
		r.tail = e
	}
}

// lastUse appends to dst, in candidate order, the candidates that are in
// the LRU with their last-use sequence numbers.
func (r *recency) lastUse(endpoints []*scheduling.Endpoint, dst []use) []use {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.entries) == 0 {
		return dst
	}
	for i, e := range endpoints {
		if en, ok := r.entries[e.Key()]; ok {
			dst = append(dst, use{index: i, seq: en.seq})
		}
	}
	return dst
}

// len returns the number of remembered endpoints.
func (r *recency) len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.entries)
}

// Registration registers no-hit-lru-scorer.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

// Interface guards.
var (
	_ scheduling.Scorer       = (*Scorer)(nil)
	_ scheduling.DataConsumer = (*Scorer)(nil)
	_ scheduling.PreRequest   = (*Scorer)(nil)
)
