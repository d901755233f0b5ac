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
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "no-hit-lru-scorer"

// prefillProfile is the profile whose target is also recorded, as in llm-d
// (prefill/decode disaggregation).
const prefillProfile = "prefill"

// neutralScore is what every endpoint gets for a warm request.
const neutralScore = 0.5

// prefixProducerType is the producer of the prefix match the loader adds
// when a configuration has none (see DefaultProducer).
const prefixProducerType = "approx-prefix-cache-producer"

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
	// remembered: the lruSize most recently used ones. The others count as
	// never used. The scorer keeps at most 2 × lruSize endpoint keys, so it
	// also bounds the scorer's memory. In [1, MaxLRUSize]. Default 1024.
	LRUSize int `json:"lruSize"`
}

// MaxLRUSize bounds lruSize: 1048576 endpoints, far more than a pool has.
const MaxLRUSize = 1 << 20

// DefaultParams returns llm-d's defaults.
func DefaultParams() Params {
	return Params{PrefixPluginType: "prefix-cache-scorer", PrefixPluginName: "prefix-cache-scorer", LRUSize: 1024}
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	if p.LRUSize <= 0 || p.LRUSize > MaxLRUSize {
		errs = append(errs, fmt.Errorf("lruSize: must be in [1, %d], got %d", MaxLRUSize, p.LRUSize))
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
	if err := p.Validate(); err != nil {
		return nil, err
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

// DefaultProducer implements scheduling.DefaultProducer: without a
// configured producer of the prefix match, the loader adds an
// approx-prefix-cache-producer. The scorer passes no parameters, so a
// prefix-cache-scorer's parameters win when one is configured; otherwise
// the producer takes its defaults.
func (s *Scorer) DefaultProducer(key string) (pluginType string, params []byte, ok bool) {
	if key == scheduling.PrefixMatchKey.Name() {
		return prefixProducerType, nil, true
	}
	return "", nil, false
}

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

// recency remembers the sequence number of the last cold request of the
// cap most recently used endpoints; the others count as never used. It
// takes no lock:
//
//   - Each known endpoint key has a slot holding its sequence number and
//     its state (remembered, forgotten, or removed) in one atomic word;
//     every state change is a compare-and-swap on that word, so a use and
//     a concurrent eviction of the same slot cannot both win.
//   - The key → slot map is an immutable snapshot behind an atomic
//     pointer. Scoring loads it once and reads each candidate's slot with
//     an atomic load.
//   - Recording a use of a known key raises (or revives) its slot, without
//     allocating. When that makes more than cap slots remembered, the least
//     recently used one is found by a scan of the snapshot (O(cap), no
//     allocation) and marked forgotten.
//   - Only a key the snapshot lacks copies the snapshot (O(cap)), once per
//     endpoint while the pool has at most 2×cap endpoints. When the
//     snapshot already holds 2×cap keys, the copy leaves out the forgotten
//     ones (their slots become removed), which bounds the memory.
//
// live counts the remembered slots, minus the evictions under way: an
// evictor first takes its unit from live, then forgets one slot.
type recency struct {
	cap  int
	seq  atomic.Uint64 // the last sequence number handed out
	live atomic.Int64
	snap atomic.Pointer[map[string]*slot]

	// afterScan, when set by a test, runs in forgetOldest between the scan
	// and the compare-and-swap that forgets the slot it found.
	afterScan func(oldest *slot)
}

// slot holds an endpoint's last-use sequence number and its state.
type slot struct{ v atomic.Uint64 }

const (
	// forgotten marks a slot that is no longer among the cap most recently
	// used; a later use revives it.
	forgotten = 1 << 63
	// removed marks a slot dropped from the snapshot; it is never used
	// again, and a later use of its key gets a new slot.
	removed = 1 << 62
	// stateBits are the state flags of a slot.
	stateBits = forgotten | removed
)

func newSlot(seq uint64) *slot {
	s := &slot{}
	s.v.Store(seq)
	return s
}

// use records a use with sequence number seq: it raises a remembered
// slot's number (unless it is larger already) or revives a forgotten slot.
// It reports whether the slot took the use (false for a removed slot) and
// whether it revived the slot.
func (s *slot) use(seq uint64) (ok, revived bool) {
	for {
		v := s.v.Load()
		switch {
		case v&removed != 0:
			return false, false
		case v&forgotten != 0:
			if s.v.CompareAndSwap(v, seq) {
				return true, true
			}
		case v >= seq:
			return true, false
		default:
			if s.v.CompareAndSwap(v, seq) {
				return true, false
			}
		}
	}
}

func newRecency(capacity int) *recency {
	r := &recency{cap: capacity}
	r.snap.Store(&map[string]*slot{})
	return r
}

// touch records a use of key as the most recent.
func (r *recency) touch(key string) {
	seq := r.seq.Add(1)
	for {
		old := r.snap.Load()
		cur := *old
		if sl := cur[key]; sl != nil {
			if ok, revived := sl.use(seq); ok {
				if revived {
					r.added()
				}
				return
			}
			// Removed: the key needs a new slot.
		}
		if r.snap.CompareAndSwap(old, r.with(cur, key, seq)) {
			r.added()
			return
		}
	}
}

// with returns a copy of m in which key has a new slot remembering seq.
// When m holds 2×cap keys, the copy leaves out the forgotten ones, marking
// them removed; a slot revived meanwhile stays. Removed slots are left out
// always.
func (r *recency) with(m map[string]*slot, key string, seq uint64) *map[string]*slot {
	compact := len(m) >= 2*r.cap
	size := len(m) + 1
	if compact {
		size = r.cap + 1
	}
	next := make(map[string]*slot, size)
	for k, sl := range m {
		if k == key {
			continue
		}
		v := sl.v.Load()
		if v&removed != 0 || compact && v&forgotten != 0 && sl.v.CompareAndSwap(v, v|removed) {
			continue
		}
		next[k] = sl
	}
	next[key] = newSlot(seq)
	return &next
}

// added accounts for a slot that became remembered and forgets the least
// recently used ones while more than cap are.
func (r *recency) added() {
	r.live.Add(1)
	for {
		n := r.live.Load()
		if n <= int64(r.cap) {
			return
		}
		if r.live.CompareAndSwap(n, n-1) {
			r.forgetOldest()
		}
	}
}

// forgetOldest marks the remembered slot with the smallest sequence number
// forgotten. A use of that slot racing with it makes the compare-and-swap
// fail, and the scan starts over. The caller took a unit from live, so
// at least one remembered slot is there to forget (the scan can miss it
// only while other slots change state under it, and then scans again).
func (r *recency) forgetOldest() {
	for {
		var (
			oldest *slot
			seq    uint64
		)
		for _, sl := range *r.snap.Load() {
			if v := sl.v.Load(); v&stateBits == 0 && (oldest == nil || v < seq) {
				oldest, seq = sl, v
			}
		}
		if oldest == nil {
			continue
		}
		if r.afterScan != nil {
			r.afterScan(oldest)
		}
		if oldest.v.CompareAndSwap(seq, seq|forgotten) {
			return
		}
	}
}

// lastUse appends to dst, in candidate order, the candidates that are
// remembered with their last-use sequence numbers.
func (r *recency) lastUse(endpoints []*scheduling.Endpoint, dst []use) []use {
	m := *r.snap.Load()
	if len(m) == 0 {
		return dst
	}
	for i, e := range endpoints {
		if sl := m[e.Key()]; sl != nil {
			if v := sl.v.Load(); v&stateBits == 0 {
				dst = append(dst, use{index: i, seq: v})
			}
		}
	}
	return dst
}

// len returns the number of remembered endpoints.
func (r *recency) len() int {
	n := 0
	for _, sl := range *r.snap.Load() {
		if sl.v.Load()&stateBits == 0 {
			n++
		}
	}
	return n
}

// keys returns the number of endpoint keys kept, remembered or not.
func (r *recency) keys() int { return len(*r.snap.Load()) }

// Registration registers no-hit-lru-scorer.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

// Interface guards.
var (
	_ scheduling.Scorer          = (*Scorer)(nil)
	_ scheduling.DataConsumer    = (*Scorer)(nil)
	_ scheduling.DefaultProducer = (*Scorer)(nil)
	_ scheduling.PreRequest      = (*Scorer)(nil)
)
