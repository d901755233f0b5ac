package hashring

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Retention of members that are not among the current candidates.
const (
	// MemberTTL is how long a member that is no longer a candidate keeps
	// its place in the next rebuild.
	MemberTTL = 10 * time.Minute
	// MaxRetained bounds the members kept beyond the candidates of the
	// request that triggers a rebuild, most recently seen first.
	MaxRetained = 4096
)

// Member is one endpoint on the ring, by key (the ring never holds
// endpoints, which would keep old snapshots alive).
type Member struct {
	KeyHash uint64 // scheduling.Endpoint.KeyHash
	Key     string
}

// Ring is a hash ring of members with vnodes points each. Immutable once
// built but for the members' last-seen times.
type Ring struct {
	points   []uint64 // sorted
	owners   []uint32 // owners[i] is the member owning points[i]
	members  []Member
	index    map[uint64]int32 // KeyHash → member
	starts   []int32          // member m's points are byMember[starts[m]:starts[m+1]]
	byMember []uint32         // ring indices, ascending per member
	lastSeen []atomic.Int64   // unix seconds the member was last a candidate
	checked  atomic.Int64     // unix seconds of the last prune check (the build's at first)
}

// PointHash is the ring point of a member's v-th virtual node: the xxhash
// of its key mixed with v by SplitMix64's finalizer, the same in every
// process.
func PointHash(keyHash uint64, v int) uint64 {
	z := keyHash + uint64(v+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Build makes the ring of members (distinct keys) with vnodes points each.
// Points that collide (64-bit ties) are ordered by key, so every process
// builds the same ring whatever the members' order.
func Build(members []Member, vnodes int) *Ring {
	r := &Ring{members: members, index: make(map[uint64]int32, len(members)), lastSeen: make([]atomic.Int64, len(members))}
	type point struct {
		at    uint64
		owner uint32
	}
	pts := make([]point, 0, len(members)*vnodes)
	for i, m := range members {
		if _, taken := r.index[m.KeyHash]; !taken {
			r.index[m.KeyHash] = int32(i)
		}
		h := xxhash.Sum64String(m.Key)
		for v := range vnodes {
			pts = append(pts, point{at: PointHash(h, v), owner: uint32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(members[a.owner].Key, members[b.owner].Key)
	})
	r.points = make([]uint64, len(pts))
	r.owners = make([]uint32, len(pts))
	r.starts = make([]int32, len(members)+1)
	for i, p := range pts {
		r.points[i], r.owners[i] = p.at, p.owner
		r.starts[p.owner+1]++
	}
	for m := range members {
		r.starts[m+1] += r.starts[m]
	}
	r.byMember = make([]uint32, len(pts))
	fill := slices.Clone(r.starts[:len(members)])
	for i, o := range r.owners {
		r.byMember[fill[o]] = uint32(i)
		fill[o]++
	}
	return r
}

// Members returns how many members the ring has.
func (r *Ring) Members() int { return len(r.members) }

// Points returns how many points the ring has.
func (r *Ring) Points() int { return len(r.points) }

// Has reports whether key is a member.
func (r *Ring) Has(keyHash uint64, key string) bool { return r.find(keyHash, key) >= 0 }

// find returns the member of key, or -1. Two keys whose 64-bit hashes
// collide share an index entry: the other is found by a scan.
func (r *Ring) find(keyHash uint64, key string) int {
	j, ok := r.index[keyHash]
	if !ok {
		return -1
	}
	if r.members[j].Key == key {
		return int(j)
	}
	for i := range r.members {
		if r.members[i].KeyHash == keyHash && r.members[i].Key == key {
			return i
		}
	}
	return -1
}

// Cache holds one ring over a superset of the candidates seen. Safe for
// concurrent use; a request whose candidates are all members takes no
// lock.
type Cache struct {
	vnodes  int
	now     func() time.Time
	cur     atomic.Pointer[Ring]
	mu      sync.Mutex // serialises rebuilds only
	builds  atomic.Int64
	closed  atomic.Bool
	onBuild func(members, points int)

	ttl         time.Duration // MemberTTL; tests shorten
	maxRetained int           // MaxRetained; tests shrink
}

// NewCache returns an empty cache of rings with vnodes points per member.
// now is the clock of the members' last-seen times (time.Now if nil);
// onBuild, if not nil, is called after each rebuild (for a log line).
func NewCache(vnodes int, now func() time.Time, onBuild func(members, points int)) *Cache {
	if now == nil {
		now = time.Now
	}
	c := &Cache{vnodes: vnodes, now: now, onBuild: onBuild, ttl: MemberTTL, maxRetained: MaxRetained}
	c.cur.Store(Build(nil, vnodes))
	return c
}

// Builds returns how many rings the cache has built.
func (c *Cache) Builds() int64 { return c.builds.Load() }

// Ring returns the current ring.
func (c *Cache) Ring() *Ring { return c.cur.Load() }

// Close drops the ring; views built afterwards use rings that are not
// kept.
func (c *Cache) Close() {
	c.closed.Store(true)
	c.cur.Store(Build(nil, c.vnodes))
}

// View maps the candidates onto the current ring into v, rebuilding the
// ring over the union when a candidate is not a member.
func (c *Cache) View(scored []scheduling.ScoredEndpoint, v *View) {
	sec := c.now().Unix()
	r := c.cur.Load()
	if v.mapOnto(r, scored, sec) {
		// A ring far larger than the candidates may hold departed
		// endpoints (the pool shrank: no new endpoint triggers a
		// rebuild), which every pick would keep paying for. Once per
		// MemberTTL one request checks, and prunes when most members went
		// unseen for MemberTTL (a filtered subset beside whole-pool
		// requests prunes nothing). This request goes on with r.
		if len(r.members) > 2*v.n+64 {
			if last := r.checked.Load(); sec-last > int64(c.ttl/time.Second) && r.checked.CompareAndSwap(last, sec) {
				c.prune(r, sec)
			}
		}
		return
	}
	r = c.rebuild(scored, sec)
	if !v.mapOnto(r, scored, sec) {
		// Unreachable: the ring was built over these candidates. Should
		// it happen, a ring of the candidates alone picks the same.
		c.builds.Add(1)
		v.mapOnto(Build(candidateMembers(scored), c.vnodes), scored, sec)
	}
}

// candidateMembers returns the distinct candidates as members, in their
// order.
func candidateMembers(scored []scheduling.ScoredEndpoint) []Member {
	members := make([]Member, 0, len(scored))
	in := make(map[string]struct{}, len(scored))
	for i := range scored {
		e := scored[i].Endpoint
		if _, dup := in[e.Key()]; !dup {
			in[e.Key()] = struct{}{}
			members = append(members, Member{KeyHash: e.KeyHash(), Key: e.Key()})
		}
	}
	return members
}

// prune replaces r, while it is the current ring, by the ring of its
// members seen within MemberTTL, in their order, when more than half of
// them were not.
func (c *Cache) prune(r *Ring, sec int64) {
	oldest := sec - int64(c.ttl/time.Second)
	stale := 0
	for j := range r.members {
		if r.lastSeen[j].Load() < oldest {
			stale++
		}
	}
	if 2*stale <= len(r.members) || c.closed.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur.Load() != r || c.closed.Load() {
		return
	}
	members := make([]Member, 0, len(r.members)-stale)
	seen := make([]int64, 0, len(r.members)-stale)
	for j, m := range r.members {
		if s := r.lastSeen[j].Load(); s >= oldest {
			members = append(members, m)
			seen = append(seen, s)
		}
	}
	n := Build(members, c.vnodes)
	n.checked.Store(sec)
	for j := range n.members {
		n.lastSeen[j].Store(seen[j])
	}
	c.builds.Add(1)
	c.cur.Store(n)
	if c.onBuild != nil {
		c.onBuild(n.Members(), n.Points())
	}
}

// rebuild builds the ring of the candidates and of the current members
// seen within MemberTTL (at most MaxRetained of them, the most recent).
func (c *Cache) rebuild(scored []scheduling.ScoredEndpoint, sec int64) *Ring {
	build := func(old *Ring) *Ring {
		members := candidateMembers(scored)
		in := make(map[string]struct{}, len(members))
		for _, m := range members {
			in[m.Key] = struct{}{}
		}
		type kept struct {
			m    Member
			seen int64
		}
		var retained []kept
		oldest := sec - int64(c.ttl/time.Second)
		for j, m := range old.members {
			if _, dup := in[m.Key]; dup {
				continue
			}
			if s := old.lastSeen[j].Load(); s >= oldest {
				retained = append(retained, kept{m, s})
			}
		}
		if len(retained) > c.maxRetained {
			slices.SortFunc(retained, func(a, b kept) int { return cmp.Compare(b.seen, a.seen) })
			retained = retained[:c.maxRetained]
		}
		for _, k := range retained {
			members = append(members, k.m)
		}
		// The candidates' order (the snapshot's), then the retained ones:
		// a request's candidates, the pool or a filtered subset of it,
		// usually map onto the members in one merge pass.
		r := Build(members, c.vnodes)
		r.checked.Store(sec)
		for j, m := range r.members {
			if oj := old.find(m.KeyHash, m.Key); oj >= 0 {
				r.lastSeen[j].Store(old.lastSeen[oj].Load())
			}
		}
		c.builds.Add(1)
		return r
	}
	if c.closed.Load() {
		return build(c.cur.Load()) // closed: cache nothing more
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cur.Load()
	if coversAll(old, scored) {
		return old // built while this request waited
	}
	r := build(old)
	if !c.closed.Load() {
		c.cur.Store(r)
	}
	if c.onBuild != nil {
		c.onBuild(r.Members(), r.Points())
	}
	return r
}

func coversAll(r *Ring, scored []scheduling.ScoredEndpoint) bool {
	for i := range scored {
		if e := scored[i].Endpoint; !r.Has(e.KeyHash(), e.Key()) {
			return false
		}
	}
	return true
}

// View is one request's candidates on a ring, and its walk. Reusable
// (pool it); it holds no endpoint.
type View struct {
	ring *Ring
	pos  []int32  // member → index in scored, -1 when not a candidate
	seen []uint64 // members the walk has returned
	n    int      // distinct candidates

	// The walk.
	at, step, budget, left int
	exact                  bool
	order                  []ranked
	next                   int
}

type ranked struct {
	rel uint32 // ring steps from the start to the member's first point
	m   uint32
}

// Candidates returns the number of distinct candidates mapped.
func (v *View) Candidates() int { return v.n }

// Release drops the view's ring (before the view is pooled).
func (v *View) Release() { v.ring = nil }

// mapOnto maps the candidates onto r; false when one is not a member.
func (v *View) mapOnto(r *Ring, scored []scheduling.ScoredEndpoint, sec int64) bool {
	m := len(r.members)
	v.ring = r
	v.pos = slices.Grow(v.pos[:0], m)[:m]
	for j := range v.pos {
		v.pos[j] = -1
	}
	v.n = 0
	// Candidates usually come in the members' order: a merge pass finds
	// each within a few steps of the last; one out of order is looked up
	// in the index, and the merge goes on from it.
	j := 0
	for i := range scored {
		e := scored[i].Endpoint
		kh := e.KeyHash()
		mj := -1
		for end := min(j+mergeWindow, m); j < end; j++ {
			if r.members[j].KeyHash == kh && r.members[j].Key == e.Key() {
				mj = j
				break
			}
		}
		if mj < 0 {
			if mj = r.find(kh, e.Key()); mj < 0 {
				return false
			}
		}
		j = mj + 1
		if v.pos[mj] >= 0 {
			continue // the same endpoint twice
		}
		v.pos[mj] = int32(i)
		v.n++
		if ls := &r.lastSeen[mj]; ls.Load() < sec {
			ls.Store(sec)
		}
	}
	return true
}

// mergeWindow is how many members the merge pass looks at before it
// looks a candidate up in the index.
const mergeWindow = 16

// Start begins a walk clockwise from the first point at or after h.
func (v *View) Start(h uint64) {
	r := v.ring
	v.at, v.step, v.left, v.exact, v.next = 0, 0, v.n, false, 0
	if len(r.points) > 0 {
		at, _ := slices.BinarySearch(r.points, h)
		if at == len(r.points) {
			at = 0
		}
		v.at = at
	}
	w := (len(r.members) + 63) / 64
	v.seen = slices.Grow(v.seen[:0], w)[:w]
	clear(v.seen)
	// Steps before switching to ranking: expected about members/n per
	// candidate found, so a generous multiple of that keeps dense walks
	// on the ring and bounds sparse ones.
	v.budget = budgetBase + budgetScale*len(r.members)/max(v.n, 1)
}

// The walk's step budget per candidate returned: budgetBase +
// budgetScale × members / candidates. Variables for tests.
var budgetBase, budgetScale = 64, 8

// Next returns the index in scored of the next distinct candidate
// clockwise, or -1 when every candidate has been returned.
func (v *View) Next() int {
	if v.left == 0 {
		return -1
	}
	r := v.ring
	np := len(r.points)
	if !v.exact {
		for spent := 0; v.step < np; spent++ {
			if spent == v.budget {
				v.rank()
				break
			}
			m := r.owners[(v.at+v.step)%np]
			v.step++
			if i := v.pos[m]; i >= 0 && !v.take(int(m)) {
				v.left--
				return int(i)
			}
		}
		if !v.exact {
			return -1 // unreachable: every candidate has points
		}
	}
	for v.next < len(v.order) {
		m := v.order[v.next].m
		v.next++
		if !v.take(int(m)) {
			v.left--
			return int(v.pos[m])
		}
	}
	return -1
}

// rank orders the candidates not yet returned by the ring steps from the
// start to their first point: the order the walk would meet them.
func (v *View) rank() {
	r := v.ring
	np := uint32(len(r.points))
	v.order = v.order[:0]
	for m, i := range v.pos {
		if i < 0 || v.seen[m/64]&(1<<(m%64)) != 0 {
			continue
		}
		idx := r.byMember[r.starts[m]:r.starts[m+1]]
		k, _ := slices.BinarySearch(idx, uint32(v.at))
		var rel uint32
		if k < len(idx) {
			rel = idx[k] - uint32(v.at)
		} else {
			rel = idx[0] + np - uint32(v.at)
		}
		v.order = append(v.order, ranked{rel: rel, m: uint32(m)})
	}
	slices.SortFunc(v.order, func(a, b ranked) int { return cmp.Compare(a.rel, b.rel) })
	v.exact, v.next = true, 0
}

// take marks member m returned and reports whether it already was.
func (v *View) take(m int) bool {
	w, b := m/64, uint64(1)<<(m%64)
	if v.seen[w]&b != 0 {
		return true
	}
	v.seen[w] |= b
	return false
}
