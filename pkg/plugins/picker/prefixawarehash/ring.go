package prefixawarehash

import (
	"cmp"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// cacheSize is how many candidate sets keep their ring.
const cacheSize = 8

// ring is the hash ring of one candidate set. Immutable once built; it
// holds the candidates' keys, never the endpoints (which would keep old
// snapshots alive). Points are placed exactly as the
// consistent-hash-picker places them (xxhash of the endpoint's key mixed
// with the virtual node's number), so the model-hash fallback picks what
// ConsistentHash picks over the same candidates and virtual nodes.
type ring struct {
	set     uint64   // scheduling.CandidateSetHash of the members
	points  []uint64 // sorted
	owners  []uint32 // owners[i] is the member owning points[i]
	members []member // in the order of the candidates it was built from
	index   map[uint64]int32
}

type member struct {
	keyHash uint64 // scheduling.Endpoint.KeyHash, to find it in a request
	key     string
}

// ringCache holds the most recently built rings, newest first.
type ringCache struct {
	rings [cacheSize]*ring
}

// lookup returns the cached ring of a set.
func (c *ringCache) lookup(set uint64, n int) *ring {
	for _, r := range c.rings {
		if r != nil && r.set == set && len(r.members) == n {
			return r
		}
	}
	return nil
}

// with returns a cache holding r first, then the others, the oldest
// dropped.
func (c *ringCache) with(r *ring) *ringCache {
	next := &ringCache{}
	next.rings[0] = r
	j := 1
	for _, old := range c.rings {
		if old != nil && old != r && j < cacheSize {
			next.rings[j] = old
			j++
		}
	}
	return next
}

// pointHash is the ring point of a member's v-th virtual node: the xxhash
// of its key mixed with v by SplitMix64's finalizer.
func pointHash(keyHash uint64, v int) uint64 {
	z := keyHash + uint64(v+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// build makes the ring of the candidates with vnodes points each.
func build(scored []scheduling.ScoredEndpoint, set uint64, vnodes int) *ring {
	r := &ring{set: set, members: make([]member, len(scored)), index: make(map[uint64]int32, len(scored))}
	type point struct {
		at    uint64
		owner uint32
	}
	pts := make([]point, 0, len(scored)*vnodes)
	for i := range scored {
		e := scored[i].Endpoint
		r.members[i] = member{keyHash: e.KeyHash(), key: e.Key()}
		r.index[e.KeyHash()] = int32(i)
		h := xxhash.Sum64String(e.Key())
		for v := range vnodes {
			pts = append(pts, point{at: pointHash(h, v), owner: uint32(i)})
		}
	}
	// Ties (64-bit collisions) break by key, so every process builds the
	// same ring whatever the candidates' order.
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(r.members[a.owner].key, r.members[b.owner].key)
	})
	r.points = make([]uint64, len(pts))
	r.owners = make([]uint32, len(pts))
	for i, p := range pts {
		r.points[i], r.owners[i] = p.at, p.owner
	}
	return r
}

// start returns the index of the first point at or after h, wrapping.
func (r *ring) start(h uint64) int {
	at, _ := slices.BinarySearch(r.points, h)
	if at == len(r.points) {
		at = 0
	}
	return at
}

// positions maps the ring's members to the candidates of a request: nil
// when the candidates are in the ring's own order (the usual case: the
// snapshot's name order), else pos[member] = index in scored, built in
// buf. ok is false when a member is not among the candidates (two sets
// collided on their 64-bit hash).
func (r *ring) positions(scored []scheduling.ScoredEndpoint, buf []int32) (pos []int32, ok bool) {
	if len(scored) != len(r.members) {
		return nil, false
	}
	same := true
	for i := range scored {
		e, m := scored[i].Endpoint, &r.members[i]
		if e.KeyHash() != m.keyHash || e.Key() != m.key {
			same = false
			break
		}
	}
	if same {
		return nil, true
	}
	pos = slices.Grow(buf[:0], len(scored))[:len(scored)]
	for i := range pos {
		pos[i] = -1
	}
	for i := range scored {
		e := scored[i].Endpoint
		j, found := r.index[e.KeyHash()]
		if !found || r.members[j].key != e.Key() || pos[j] >= 0 {
			return nil, false
		}
		pos[j] = int32(i)
	}
	return pos, true
}
