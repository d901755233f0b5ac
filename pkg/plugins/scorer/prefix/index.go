package prefix

import (
	"maps"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// The index remembers, for every endpoint, the block hashes of the prompts
// recently sent to it, and answers "which endpoints hold this chain of
// blocks" for the request path.
//
// Layout and locking:
//
//   - Each endpoint has its own LRU of block hashes (endpointLRU) with its
//     own mutex. Only PreRequest (adding a routed prompt) and pruning take
//     it.
//   - The reverse map hash → endpoints is split into numShards shards by
//     hash, each with its own RWMutex. Lookups take one shard read lock per
//     block and hold it only while they read the holders of that block.
//   - Lock order is endpoint lock, then shard lock. A shard lock is never
//     held while taking an endpoint lock, so the two cannot deadlock.
//   - Endpoints get a small integer id so the reverse map stores ids, not
//     strings, in pointer-free open-addressing tables (see table) that the
//     garbage collector does not scan. The ids live in an immutable
//     snapshot (idTable: id → endpoint and key → id) that is replaced, copy
//     on write, whenever an endpoint joins or leaves; lookups read it
//     without a lock.
//
// Invariant (outside the short window of one add or remove): hash h is in
// endpoint e's LRU if and only if e's id is among the holders of h. Every
// entry belongs to exactly one endpoint LRU, so the total number of entries
// is at most the sum of the LRU capacities.
//
// An id freed by removing an endpoint can be reused by a new endpoint. A
// match result never reports one endpoint's blocks under another's key:
// it keeps the snapshot it read its ids from and answers by key through
// that snapshot, and match drops every id whose owner changed while it
// walked (see match). So a result describes the index as it was when it was
// computed, whatever happens to the index afterwards.

const (
	// numShards is the number of reverse-map shards (a power of two).
	numShards = 64
	// maxEndpointID bounds endpoint ids so that two of them (plus one)
	// pack into a uint64 and never collide with overflowMark.
	maxEndpointID = 1<<31 - 1
	// overflowMark in a shard's holders table means the block has more than
	// two holders, listed in the shard's overflow map.
	overflowMark = ^uint64(0)
	// slotMask extracts one packed holder slot.
	slotMask = 1<<32 - 1
	// noNode marks the end of an LRU list.
	noNode = int32(-1)
)

// shard is one part of the reverse map. holders packs up to two endpoint
// ids per hash as (id+1) in the low and high 32 bits (0 is an empty slot);
// hashes with more holders store overflowMark there and keep a holderSet in
// overflow.
type shard struct {
	mu       sync.RWMutex
	holders  table[uint64]
	overflow map[uint64]*holderSet
	_        [64]byte // keep neighbouring shard locks off one cache line
}

// addHolder records that endpoint id holds hash h. Caller holds s.mu.
func (s *shard) addHolder(h uint64, id uint32) {
	slot := uint64(id) + 1
	v, ok := s.holders.get(h)
	switch {
	case !ok:
		s.holders.put(h, slot)
	case v == overflowMark:
		s.overflow[h].add(id)
	case v&slotMask == slot || v>>32 == slot:
		// Already recorded.
	case v>>32 == 0:
		s.holders.put(h, v|slot<<32)
	default:
		s.overflow[h] = &holderSet{ids: []uint32{uint32(v&slotMask) - 1, uint32(v>>32) - 1, id}, n: 3}
		s.holders.put(h, overflowMark)
	}
}

// removeHolder forgets that endpoint id holds hash h. Caller holds s.mu.
func (s *shard) removeHolder(h uint64, id uint32) {
	slot := uint64(id) + 1
	v, ok := s.holders.get(h)
	if !ok {
		return
	}
	if v == overflowMark {
		set := s.overflow[h]
		set.remove(id)
		if set.n > 2 {
			return
		}
		// Back to two holders: pack them inline again.
		var buf [2]uint32
		left := set.appendIDs(buf[:0])
		delete(s.overflow, h)
		s.holders.put(h, uint64(left[0])+1|(uint64(left[1])+1)<<32)
		return
	}
	lo, hi := v&slotMask, v>>32
	switch {
	case lo == slot && hi == 0:
		s.holders.del(h)
	case lo == slot:
		s.holders.put(h, hi)
	case hi == slot:
		s.holders.put(h, lo)
	}
}

// slotsHold reports whether a packed holders value lists id.
func slotsHold(v uint64, id uint32) bool {
	slot := uint64(id) + 1
	return v&slotMask == slot || v>>32 == slot
}

// lruNode is one entry of an endpoint's LRU list.
type lruNode struct {
	hash       uint64
	prev, next int32
}

// endpointLRU is the bounded, recency-ordered set of block hashes one
// endpoint is believed to hold. Nodes live in one slice linked by index, so
// the LRU costs one table slot and 16 bytes per hash and no pointer per node.
type endpointLRU struct {
	key string
	id  uint32
	// lastSeen is when the endpoint was last a candidate or a target, in
	// Unix nanoseconds; the stale sweep reads it.
	lastSeen atomic.Int64

	mu       sync.Mutex
	removed  bool // the endpoint was dropped from the index
	capacity int
	pos      table[int32] // hash → node index
	nodes    []lruNode
	head     int32 // most recently used
	tail     int32 // least recently used
	free     int32 // free-list head, linked through next
}

func newEndpointLRU(key string, id uint32) *endpointLRU {
	return &endpointLRU{key: key, id: id, head: noNode, tail: noNode, free: noNode}
}

func (l *endpointLRU) unlink(i int32) {
	n := &l.nodes[i]
	if n.prev != noNode {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next != noNode {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
}

func (l *endpointLRU) pushFront(i int32) {
	n := &l.nodes[i]
	n.prev, n.next = noNode, l.head
	if l.head != noNode {
		l.nodes[l.head].prev = i
	}
	l.head = i
	if l.tail == noNode {
		l.tail = i
	}
}

// idTable is an immutable snapshot of the endpoint ids. The index
// publishes a new one whenever an endpoint joins or leaves.
type idTable struct {
	byID  []*endpointLRU    // id → endpoint; nil for a free id
	byKey map[string]uint32 // endpoint key → id
	live  []uint64          // bitset of the ids in use
}

// isLive reports whether id belongs to an endpoint in t.
func (t *idTable) isLive(id uint32) bool {
	return int(id) < len(t.byID) && t.byID[id] != nil
}

// recycledIn reports whether id no longer belongs, in the later snapshot
// cur, to the endpoint it belongs to in t.
func (t *idTable) recycledIn(cur *idTable, id int) bool {
	return id >= len(cur.byID) || cur.byID[id] != t.byID[id]
}

// lookup returns the id of an endpoint key, or -1 when it has none.
func (t *idTable) lookup(key string) int32 {
	if id, ok := t.byKey[key]; ok {
		return int32(id)
	}
	return -1
}

// with returns a copy of t in which id belongs to l (or is free, for a nil
// l). Copying costs O(endpoints), paid only when an endpoint joins or
// leaves.
func (t *idTable) with(id uint32, l *endpointLRU) *idTable {
	n := max(len(t.byID), int(id)+1)
	next := &idTable{
		byID:  make([]*endpointLRU, n),
		byKey: maps.Clone(t.byKey),
		live:  make([]uint64, (n+63)/64),
	}
	copy(next.byID, t.byID)
	copy(next.live, t.live)
	if old := next.byID[id]; old != nil {
		delete(next.byKey, old.key)
	}
	next.byID[id] = l
	if l != nil {
		next.byKey[l.key] = id
		next.live[id>>6] |= 1 << (id & 63)
	} else {
		next.live[id>>6] &^= 1 << (id & 63)
	}
	return next
}

// index is the approximate prefix-cache index shared by all requests of one
// producer instance.
type index struct {
	shards [numShards]shard

	// size is the total number of entries over all endpoint LRUs.
	size atomic.Int64

	ids   atomic.Pointer[idTable]
	cands atomic.Pointer[candidateIDs] // the last candidate list resolved

	regMu   sync.Mutex // serialises registration and removal
	freeIDs []uint32   // guarded by regMu

	scratch sync.Pool // *matchScratch

	// afterFirstBlock, when set by a test, runs in match between the first
	// block and the rest, where an id can change hands.
	afterFirstBlock func()
}

// matchScratch is the per-call working memory of match, pooled. Between
// calls counts and alive are all zero.
type matchScratch struct {
	counts  []int32  // run length per endpoint id, for few hits
	alive   []uint64 // bitset of endpoints still matching, for large sets
	touched []uint32 // holders of the first block
	small   []uint32 // endpoints still matching, for small sets
}

func newIndex() *index {
	x := &index{}
	for i := range x.shards {
		x.shards[i].overflow = map[uint64]*holderSet{}
	}
	x.ids.Store(&idTable{byKey: map[string]uint32{}})
	x.scratch.New = func() any { return &matchScratch{} }
	return x
}

func (x *index) shardOf(h uint64) *shard { return &x.shards[h&(numShards-1)] }

// endpoint returns the LRU of an endpoint, creating it when create is set.
func (x *index) endpoint(key string, create bool) *endpointLRU {
	t := x.ids.Load()
	if id := t.lookup(key); id >= 0 {
		return t.byID[id]
	}
	if !create {
		return nil
	}
	x.regMu.Lock()
	defer x.regMu.Unlock()
	t = x.ids.Load()
	if id := t.lookup(key); id >= 0 {
		return t.byID[id]
	}
	var id uint32
	if n := len(x.freeIDs); n > 0 {
		id = x.freeIDs[n-1]
		x.freeIDs = x.freeIDs[:n-1]
	} else {
		if len(t.byID) > maxEndpointID {
			return nil
		}
		id = uint32(len(t.byID))
	}
	l := newEndpointLRU(key, id)
	// Publish before returning: the endpoint's id appears in the reverse
	// map only after this snapshot does, which match relies on.
	x.ids.Store(t.with(id, l))
	return l
}

// add records that the endpoint now holds hashes (a prompt's chain, first
// block first), evicting its least recently used hashes beyond capacity.
// The first block ends up the most recently used. It returns the net change
// in entries.
func (x *index) add(key string, hashes []uint64, capacity int, now int64) int {
	if len(hashes) == 0 || capacity <= 0 {
		return 0
	}
	l := x.endpoint(key, true)
	if l == nil {
		return 0
	}
	l.lastSeen.Store(now)
	delta := 0
	l.mu.Lock()
	if l.removed {
		l.mu.Unlock()
		return 0
	}
	l.capacity = capacity
	for l.pos.len() > l.capacity {
		delta -= l.evictTail(x)
	}
	// Insert the last block first so that the first block ends up most
	// recently used: like vLLM, a sequence's tail blocks are evicted before
	// its head, which keeps the shared leading blocks matchable.
	for j := len(hashes) - 1; j >= 0; j-- {
		h := hashes[j]
		if i, ok := l.pos.get(h); ok {
			if i != l.head {
				l.unlink(i)
				l.pushFront(i)
			}
			continue
		}
		if l.pos.len() >= l.capacity {
			delta -= l.evictTail(x)
		}
		var i int32
		if l.free != noNode {
			i = l.free
			l.free = l.nodes[i].next
		} else {
			i = int32(len(l.nodes))
			l.nodes = append(l.nodes, lruNode{})
		}
		l.nodes[i].hash = h
		l.pushFront(i)
		l.pos.put(h, i)
		s := x.shardOf(h)
		s.mu.Lock()
		s.addHolder(h, l.id)
		s.mu.Unlock()
		delta++
	}
	l.mu.Unlock()
	x.size.Add(int64(delta))
	return delta
}

// evictTail drops the least recently used hash of l. Caller holds l.mu.
func (l *endpointLRU) evictTail(x *index) int {
	i := l.tail
	if i == noNode {
		return 0
	}
	h := l.nodes[i].hash
	l.unlink(i)
	l.pos.del(h)
	l.nodes[i].next = l.free
	l.free = i
	s := x.shardOf(h)
	s.mu.Lock()
	s.removeHolder(h, l.id)
	s.mu.Unlock()
	return 1
}

// remove drops an endpoint and all its entries. It returns whether the
// endpoint was known.
func (x *index) remove(key string) bool {
	x.regMu.Lock()
	defer x.regMu.Unlock()
	t := x.ids.Load()
	id := t.lookup(key)
	if id < 0 {
		return false
	}
	l := t.byID[id]
	// Unpublish first, so that a request routed to the key from now on
	// registers it anew (after this removal, which holds regMu).
	x.ids.Store(t.with(l.id, nil))
	l.mu.Lock()
	l.removed = true
	n := l.pos.len()
	for i := l.head; i != noNode; i = l.nodes[i].next {
		h := l.nodes[i].hash
		s := x.shardOf(h)
		s.mu.Lock()
		s.removeHolder(h, l.id)
		s.mu.Unlock()
	}
	l.pos, l.nodes = table[int32]{}, nil
	l.head, l.tail, l.free = noNode, noNode, noNode
	l.mu.Unlock()
	x.size.Add(-int64(n))
	// The id is reusable only now that no holder lists it.
	x.freeIDs = append(x.freeIDs, l.id)
	return true
}

// prune removes every endpoint for which keep returns false and returns how
// many were removed.
func (x *index) prune(keep func(key string) bool) int {
	removed := 0
	for _, l := range x.ids.Load().byID {
		if l != nil && !keep(l.key) && x.remove(l.key) {
			removed++
		}
	}
	return removed
}

// keys returns the keys of the endpoints in the index, for tests and
// debugging.
func (x *index) keys() []string {
	var out []string
	for _, l := range x.ids.Load().byID {
		if l != nil {
			out = append(out, l.key)
		}
	}
	return out
}

// match walks hashes from the first block and returns, for every endpoint
// that holds the first block, the number of leading consecutive blocks it
// holds. The walk stops at the first block that extends no endpoint's run.
// ok is false when no endpoint holds the first block; nothing is allocated
// then, and nothing either when few endpoints do (the hits fit in the
// result). Otherwise the result holds one int32 per endpoint id.
//
// The set of endpoints still matching is a short list while small and a
// bitset over endpoint ids while large, so a prefix held by every endpoint
// costs one word operation per 64 endpoints per block, not one per
// endpoint.
//
// The result is in the ids of the snapshot loaded at the start. An id
// recycled during the walk could have lent a new endpoint's blocks to the
// old key; the walk therefore ends by dropping every id whose owner is no
// longer the one in that snapshot.
func (x *index) match(hashes []uint64) (out prefixHits, ok bool) {
	if len(hashes) == 0 {
		return out, false
	}
	t := x.ids.Load()
	ids := t.byID
	nIDs := len(ids)
	if nIDs == 0 {
		return out, false
	}
	sc := x.scratch.Get().(*matchScratch)
	defer x.scratch.Put(sc)
	if len(sc.counts) < nIDs {
		sc.counts = make([]int32, nIDs)
	}
	nWords := (nIDs + 63) / 64

	// Block 0: its holders are the only endpoints that can match, minus
	// the ids free in the snapshot or beyond it (endpoints registered after
	// it was taken). A large holder set is intersected with the live ids
	// word by word into the alive bitset; a small one becomes the list.
	if len(sc.alive) < nWords {
		sc.alive = make([]uint64, nWords)
	}
	alive := sc.alive[:nWords]
	small := sc.small[:0]
	large := false
	hits, maxID := 0, 0
	h := hashes[0]
	s := x.shardOf(h)
	s.mu.RLock()
	if v, ok := s.holders.get(h); ok && v != overflowMark {
		for _, slot := range [2]uint64{v & slotMask, v >> 32} {
			if slot != 0 {
				small = append(small, uint32(slot-1))
			}
		}
	} else if ok {
		if set := s.overflow[h]; set.bits == nil {
			small = append(small, set.ids...)
		} else {
			large = true
			for w := range min(len(alive), len(set.bits)) {
				if a := set.bits[w] & t.live[w]; a != 0 {
					alive[w] = a
					hits += bits.OnesCount64(a)
					maxID = w<<6 | (63 - bits.LeadingZeros64(a))
				}
			}
		}
	}
	s.mu.RUnlock()
	if large && hits <= fewHitsMax {
		// Few live holders after all: continue with the list.
		for w, a := range alive {
			for ; a != 0; a &= a - 1 {
				small = append(small, uint32(w<<6|bits.TrailingZeros64(a)))
			}
			alive[w] = 0
		}
		large = false
	}
	if !large {
		n := 0
		for _, id := range small {
			if t.isLive(id) {
				small[n] = id
				n++
				maxID = max(maxID, int(id))
			}
		}
		small = small[:n]
		hits = n
	}
	sc.small = small
	if hits == 0 {
		return out, false
	}
	if x.afterFirstBlock != nil {
		x.afterFirstBlock()
	}
	// Few hits are counted in the pooled scratch and copied into the
	// result, so touched keeps their ids; many are counted straight into
	// the result's per-id slice.
	counts := sc.counts
	touched := append(sc.touched[:0], small...)
	sc.touched = touched
	if hits > fewHitsMax {
		out.dense = make([]int32, maxID+1)
		counts = out.dense
	}

	// walked is the number of leading blocks every survivor holds. An
	// endpoint that drops out at block i holds i blocks.
	walked := 1
	for i := 1; i < len(hashes); i++ {
		h := hashes[i]
		s := x.shardOf(h)
		s.mu.RLock()
		v, ok := s.holders.get(h)
		var set *holderSet
		if ok && v == overflowMark {
			set = s.overflow[h]
		}
		if large {
			if set != nil && set.bits != nil {
				any := false
				for w := range alive {
					a := alive[w]
					if a == 0 {
						continue
					}
					var hb uint64
					if w < len(set.bits) {
						hb = set.bits[w]
					}
					kept := a & hb
					for d := a &^ kept; d != 0; d &= d - 1 {
						counts[w<<6|bits.TrailingZeros64(d)] = int32(i)
					}
					alive[w] = kept
					any = any || kept != 0
				}
				s.mu.RUnlock()
				if !any {
					large = false
					break
				}
				walked = i + 1
				continue
			}
			// A small holder set: the survivors fit in the list.
			small = small[:0]
			switch {
			case set != nil:
				for _, id := range set.ids {
					if int(id) < nIDs && alive[id>>6]&(1<<(id&63)) != 0 {
						small = append(small, id)
					}
				}
			case ok:
				for _, slot := range [2]uint64{v & slotMask, v >> 32} {
					if id := uint32(slot - 1); slot != 0 && int(id) < nIDs && alive[id>>6]&(1<<(id&63)) != 0 {
						small = append(small, id)
					}
				}
			}
			s.mu.RUnlock()
			for _, id := range small {
				alive[id>>6] &^= 1 << (id & 63)
			}
			for w := range alive {
				for d := alive[w]; d != 0; d &= d - 1 {
					counts[w<<6|bits.TrailingZeros64(d)] = int32(i)
				}
				alive[w] = 0
			}
			large = false
			if len(small) == 0 {
				break
			}
			walked = i + 1
			continue
		}

		kept := 0
		for _, id := range small {
			held := false
			switch {
			case set != nil:
				held = set.has(id)
			case ok:
				held = slotsHold(v, id)
			}
			if held {
				small[kept] = id
				kept++
			} else {
				counts[id] = int32(i)
			}
		}
		s.mu.RUnlock()
		small = small[:kept]
		if kept == 0 {
			break
		}
		walked = i + 1
	}

	// Survivors hold every walked block.
	if large {
		for w := range alive {
			for d := alive[w]; d != 0; d &= d - 1 {
				counts[w<<6|bits.TrailingZeros64(d)] = int32(walked)
			}
			alive[w] = 0
		}
	} else {
		for _, id := range small {
			counts[id] = int32(walked)
		}
	}
	sc.small = small

	// Drop the ids that changed hands during the walk (see above). The
	// snapshot is unchanged almost always, which makes this one load.
	cur := x.ids.Load()
	out.table = t
	if out.dense != nil {
		out.n = hits
		if cur != t {
			for id, c := range out.dense {
				if c > 0 && t.recycledIn(cur, id) {
					out.dense[id] = 0
					out.n--
				}
			}
		}
	} else {
		for _, id := range touched {
			if c := counts[id]; c > 0 && (cur == t || !t.recycledIn(cur, int(id))) {
				out.addFew(int32(id), c)
			}
			counts[id] = 0
		}
	}
	return out, out.n > 0
}

// markSeen records that the endpoints are alive.
func (x *index) markSeen(endpoints []*scheduling.Endpoint, now int64) {
	t := x.ids.Load()
	for _, e := range endpoints {
		if id := t.lookup(e.Key()); id >= 0 {
			t.byID[id].lastSeen.Store(now)
		}
	}
}

// sweep removes the endpoints not seen since cutoff (Unix nanoseconds) and
// returns how many were removed.
func (x *index) sweep(cutoff int64) int {
	return x.prune(func(key string) bool {
		l := x.endpoint(key, false)
		return l == nil || l.lastSeen.Load() >= cutoff
	})
}
