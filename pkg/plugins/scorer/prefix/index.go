package prefix

import (
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
//     garbage collector does not scan. The id → endpoint slice is a
//     copy-on-write snapshot, so lookups read it without a lock.
//
// Invariant (outside the short window of one add or remove): hash h is in
// endpoint e's LRU if and only if e's id is among the holders of h. Every
// entry belongs to exactly one endpoint LRU, so the total number of entries
// is at most the sum of the LRU capacities.
//
// An id freed by removing an endpoint can be reused by a new endpoint. A
// lookup running concurrently with that removal may, for one request,
// credit a block to the new endpoint; the index is approximate by nature
// and the error disappears with the next lookup.

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

// index is the approximate prefix-cache index shared by all requests of one
// producer instance.
type index struct {
	shards [numShards]shard

	// size is the total number of entries over all endpoint LRUs.
	size atomic.Int64

	byKey sync.Map                       // endpoint key → *endpointLRU
	byID  atomic.Pointer[[]*endpointLRU] // id → endpoint; nil for a free id

	regMu   sync.Mutex // serialises registration and removal
	freeIDs []uint32   // guarded by regMu

	scratch sync.Pool // *matchScratch
}

// matchScratch is the per-call working memory of match, pooled. Between
// calls counts and alive are all zero.
type matchScratch struct {
	counts  []int32  // run length per endpoint id
	alive   []uint64 // bitset of endpoints still matching, for large sets
	touched []uint32 // holders of the first block
	small   []uint32 // endpoints still matching, for small sets
}

func newIndex() *index {
	x := &index{}
	for i := range x.shards {
		x.shards[i].overflow = map[uint64]*holderSet{}
	}
	empty := []*endpointLRU{}
	x.byID.Store(&empty)
	x.scratch.New = func() any { return &matchScratch{} }
	return x
}

func (x *index) shardOf(h uint64) *shard { return &x.shards[h&(numShards-1)] }

// endpoint returns the LRU of an endpoint, creating it when create is set.
func (x *index) endpoint(key string, create bool) *endpointLRU {
	if v, ok := x.byKey.Load(key); ok {
		return v.(*endpointLRU)
	}
	if !create {
		return nil
	}
	x.regMu.Lock()
	defer x.regMu.Unlock()
	if v, ok := x.byKey.Load(key); ok {
		return v.(*endpointLRU)
	}
	old := *x.byID.Load()
	var id uint32
	if n := len(x.freeIDs); n > 0 {
		id = x.freeIDs[n-1]
		x.freeIDs = x.freeIDs[:n-1]
	} else {
		if len(old) > maxEndpointID {
			return nil
		}
		id = uint32(len(old))
	}
	l := newEndpointLRU(key, id)
	next := make([]*endpointLRU, max(len(old), int(id)+1))
	copy(next, old)
	next[id] = l
	x.byID.Store(&next)
	x.byKey.Store(key, l)
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
	v, ok := x.byKey.Load(key)
	if !ok {
		return false
	}
	l := v.(*endpointLRU)
	x.byKey.Delete(key)
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

	old := *x.byID.Load()
	next := make([]*endpointLRU, len(old))
	copy(next, old)
	next[l.id] = nil
	x.byID.Store(&next)
	x.freeIDs = append(x.freeIDs, l.id)
	return true
}

// prune removes every endpoint for which keep returns false and returns how
// many were removed.
func (x *index) prune(keep func(key string) bool) int {
	removed := 0
	for _, l := range *x.byID.Load() {
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
	for _, l := range *x.byID.Load() {
		if l != nil {
			out = append(out, l.key)
		}
	}
	return out
}

// match walks hashes from the first block and returns, for every endpoint
// that holds the first block, the number of leading consecutive blocks it
// holds. The walk stops at the first block that extends no endpoint's run.
// It returns nil when no endpoint holds the first block, so a request
// without a hit allocates nothing.
//
// The set of endpoints still matching is a short list while small and a
// bitset over endpoint ids while large, so a prefix held by every endpoint
// costs one word operation per 64 endpoints per block, not one per
// endpoint.
func (x *index) match(hashes []uint64) map[string]int {
	if len(hashes) == 0 {
		return nil
	}
	ids := *x.byID.Load()
	nIDs := len(ids)
	if nIDs == 0 {
		return nil
	}
	sc := x.scratch.Get().(*matchScratch)
	defer x.scratch.Put(sc)
	if len(sc.counts) < nIDs {
		sc.counts = make([]int32, nIDs)
	}
	counts := sc.counts
	nWords := (nIDs + 63) / 64

	// Block 0: its holders are the only endpoints that can match.
	touched := sc.touched[:0]
	h := hashes[0]
	s := x.shardOf(h)
	s.mu.RLock()
	if v, ok := s.holders.get(h); ok {
		if v != overflowMark {
			for _, slot := range [2]uint64{v & slotMask, v >> 32} {
				if slot != 0 && int(slot-1) < nIDs {
					touched = append(touched, uint32(slot-1))
				}
			}
		} else {
			touched = s.overflow[h].appendIDs(touched)
		}
	}
	s.mu.RUnlock()
	n := 0
	for _, id := range touched {
		if int(id) < nIDs {
			touched[n] = id
			n++
		}
	}
	touched = touched[:n]
	sc.touched = touched
	if len(touched) == 0 {
		return nil
	}

	small := append(sc.small[:0], touched...)
	large := len(touched) > smallSetMax
	var alive []uint64
	if large {
		if len(sc.alive) < nWords {
			sc.alive = make([]uint64, nWords)
		}
		alive = sc.alive[:nWords]
		for _, id := range touched {
			alive[id>>6] |= 1 << (id & 63)
		}
		small = small[:0]
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

	out := make(map[string]int, len(touched))
	for _, id := range touched {
		if l := ids[id]; l != nil {
			out[l.key] = int(counts[id])
		}
		counts[id] = 0
	}
	return out
}

// markSeen records that the endpoints are alive.
func (x *index) markSeen(endpoints []*scheduling.Endpoint, now int64) {
	for _, e := range endpoints {
		if v, ok := x.byKey.Load(e.Key()); ok {
			v.(*endpointLRU).lastSeen.Store(now)
		}
	}
}

// sweep removes the endpoints not seen since cutoff (Unix nanoseconds) and
// returns how many were removed.
func (x *index) sweep(cutoff int64) int {
	return x.prune(func(key string) bool {
		v, ok := x.byKey.Load(key)
		return !ok || v.(*endpointLRU).lastSeen.Load() >= cutoff
	})
}
