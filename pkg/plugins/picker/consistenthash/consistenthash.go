// Package consistenthash provides the consistent-hash-picker, the
// ConsistentHash selection strategy (Continuum Router, C-14): the resolved
// model name is hashed onto a ring of the candidates, so requests for the
// same model over the same candidate set always go to the same endpoint.
// This is model-level affinity, not session affinity; a few popular models
// can load their endpoints unevenly.
//
// Each candidate has virtualNodes points on the ring (150 by default); a
// request's endpoint owns the first point at or after the hash of its
// model, and fallbacks are the next distinct owners clockwise. Adding or
// removing a candidate moves only the models whose points it takes or
// leaves: about 1/N of them. Hashes are xxhash of the endpoint's key and
// of the model name, the same in every process, so EPP replicas agree.
//
// Rings are built from the candidates' keys and cached by the candidate
// set's hash (scheduling.CandidateSetHash) behind an atomic pointer: the
// last few sets (cacheSize), so a stable pool builds its ring once and
// alternating sets (filters that vary by model) do not rebuild per
// request. The request path takes no lock on a cache hit.
package consistenthash

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "consistent-hash-picker"

// Bounds of virtualNodes. A ring holds candidates × virtualNodes points
// of 12 bytes, and cacheSize rings are kept: 1000 endpoints at the
// default make 1.8 MB per ring.
const (
	DefaultVirtualNodes = 150
	MaxVirtualNodes     = 1000
)

// cacheSize is how many candidate sets keep their ring.
const cacheSize = 8

// Params configures a consistent-hash-picker.
type Params struct {
	pick.Params
	// VirtualNodes is the number of points each candidate has on the ring:
	// more points spread models more evenly and cost memory and build
	// time. 1..1000; default 150.
	VirtualNodes int `json:"virtualNodes"`
}

// DefaultParams returns the default parameters: one endpoint, 150 virtual
// nodes.
func DefaultParams() Params {
	return Params{Params: pick.DefaultParams(), VirtualNodes: DefaultVirtualNodes}
}

// Validate reports every invalid parameter, each prefixed by its field
// path.
func (p *Params) Validate() error {
	errs := []error{p.Params.Validate()}
	if p.VirtualNodes < 1 || p.VirtualNodes > MaxVirtualNodes {
		errs = append(errs, fmt.Errorf("virtualNodes: must be 1..%d, got %d", MaxVirtualNodes, p.VirtualNodes))
	}
	return errors.Join(errs...)
}

// Picker is a consistent-hash-picker instance. It is safe for concurrent
// use.
type Picker struct {
	pick.Base
	vnodes int

	cache   atomic.Pointer[ringCache]
	buildMu sync.Mutex   // serialises builds on a cache miss only
	builds  atomic.Int64 // rings built, for tests
	closed  atomic.Bool
}

// New returns a consistent-hash-picker.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	base, err := pick.NewBase(Type, name, p.Params, h)
	if err != nil {
		return nil, err
	}
	pk := &Picker{Base: base, vnodes: p.VirtualNodes}
	pk.cache.Store(&ringCache{})
	return pk, nil
}

// ring is the hash ring of one candidate set. Immutable once built; it
// holds the candidates' keys, never the endpoints (which would keep old
// snapshots alive).
type ring struct {
	set     uint64   // scheduling.CandidateSetHash of the members
	points  []uint64 // sorted
	owners  []uint32 // owners[i] is the member owning points[i]
	members []member
}

type member struct {
	keyHash uint64 // scheduling.Endpoint.KeyHash, to find it in a request
	key     string
}

// ringCache holds the most recently used rings, newest first.
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

// pointHash is the ring point of a member's v-th virtual node: xxhash of
// its key, mixed with v (SplitMix64's finalizer), so points spread evenly.
func pointHash(keyHash uint64, v int) uint64 {
	z := keyHash + uint64(v+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// build makes the ring of the candidates.
func build(scored []scheduling.ScoredEndpoint, set uint64, vnodes int) *ring {
	r := &ring{set: set, members: make([]member, len(scored))}
	type point struct {
		at    uint64
		owner uint32
	}
	pts := make([]point, 0, len(scored)*vnodes)
	for i := range scored {
		e := scored[i].Endpoint
		r.members[i] = member{keyHash: e.KeyHash(), key: e.Key()}
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

// ringFor returns the ring of the candidates, from the cache or built.
func (p *Picker) ringFor(scored []scheduling.ScoredEndpoint) *ring {
	set := candidateSetHash(scored)
	if r := p.cache.Load().lookup(set, len(scored)); r != nil {
		return r
	}
	if p.closed.Load() {
		p.builds.Add(1)
		return build(scored, set, p.vnodes) // closed: cache nothing more
	}
	p.buildMu.Lock()
	defer p.buildMu.Unlock()
	c := p.cache.Load()
	if r := c.lookup(set, len(scored)); r != nil {
		return r // built while this request waited
	}
	r := build(scored, set, p.vnodes)
	p.builds.Add(1)
	if !p.closed.Load() {
		p.cache.Store(c.with(r))
	}
	return r
}

// candidateSetHash is scheduling.CandidateSetHash of the scored
// endpoints, through a pooled slice of them.
func candidateSetHash(scored []scheduling.ScoredEndpoint) uint64 {
	buf := endpointsPool.Get().(*[]*scheduling.Endpoint)
	list := slices.Grow((*buf)[:0], len(scored))
	for i := range scored {
		list = append(list, scored[i].Endpoint)
	}
	set := scheduling.CandidateSetHash(list)
	clear(list) // drop endpoint references held by the pool
	*buf = list[:0]
	endpointsPool.Put(buf)
	return set
}

var endpointsPool = sync.Pool{New: func() any { return new([]*scheduling.Endpoint) }}

// ModelKey is what the picker hashes: the resolved model name (the model
// the request is sent to after rewrites), else the model the client named.
func ModelKey(req *scheduling.Request) string {
	if req == nil {
		return ""
	}
	if req.TargetModel != "" {
		return req.TargetModel
	}
	return req.Model
}

// Pick implements scheduling.Picker: the owner of the first ring point at
// or after the model's hash, then the next distinct owners clockwise.
// The same model over the same candidate set (in any order) gets the same
// endpoints. Pick does not modify scored.
func (p *Picker) Pick(_ context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	switch len(scored) {
	case 0:
		return &scheduling.ProfileResult{}
	case 1:
		return pick.Single(scored[0].Endpoint)
	}
	h := xxhash.Sum64String(ModelKey(req))
	if res, ok := p.walk(p.ringFor(scored), h, scored); ok {
		return res
	}
	// A cached ring's member is missing from the candidates only if two
	// sets collided on their 64-bit hash: use a ring of these candidates.
	res, _ := p.walk(build(scored, 0, p.vnodes), h, scored)
	return res
}

// walk returns the owners of r from the point at or after h clockwise,
// up to Max distinct ones, as endpoints of scored; false if one is not
// among them.
func (p *Picker) walk(r *ring, h uint64, scored []scheduling.ScoredEndpoint) (*scheduling.ProfileResult, bool) {
	at, _ := slices.BinarySearch(r.points, h)
	if at == len(r.points) {
		at = 0
	}
	if p.Max == 1 {
		i := find(scored, r.members[r.owners[at]])
		if i < 0 {
			return nil, false
		}
		return pick.Single(scored[i].Endpoint), true
	}
	k := min(p.Max, len(scored))
	targets := make([]*scheduling.Endpoint, 0, k)
	for step := 0; step < len(r.points) && len(targets) < k; step++ {
		i := find(scored, r.members[r.owners[(at+step)%len(r.points)]])
		if i < 0 {
			return nil, false
		}
		if !slices.Contains(targets, scored[i].Endpoint) {
			targets = append(targets, scored[i].Endpoint)
		}
	}
	return &scheduling.ProfileResult{Targets: targets}, true
}

// find returns the index of a ring member among the candidates, or -1.
func find(scored []scheduling.ScoredEndpoint, m member) int {
	for i := range scored {
		if e := scored[i].Endpoint; e.KeyHash() == m.keyHash && e.Key() == m.key {
			return i
		}
	}
	return -1
}

// Close implements scheduling.Closer: it drops the cached rings; requests
// still running on the old configuration build uncached ones.
func (p *Picker) Close(scheduling.CloseInfo) {
	p.closed.Store(true)
	p.cache.Store(&ringCache{})
}

// Registration registers the consistent-hash-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker = (*Picker)(nil)
	_ scheduling.Closer = (*Picker)(nil)
)
