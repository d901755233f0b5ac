// Package prefixawarehash provides the prefix-aware-hash-picker, the
// PrefixAwareHash selection strategy of the Continuum Router (C-15 …
// C-17): consistent hashing with bounded loads (CHWBL, Mirrokni, Thorup
// and Zadimoghaddam) over the request's candidates, so requests that share
// a prompt prefix go to the same endpoint while no endpoint takes more
// than its share of the load.
//
// The key is SHA-256 of the model name and the system prompt, or of the
// first user message when there is no system prompt, cut to
// maxPrefixLength bytes (KeyMaterial, Key). It is placed on a ring of the
// candidates (virtualNodes points each); the walk starts at the first
// point at or after it and takes the first endpoint whose in-flight count
// (the EPP's own, scheduling.LoadKey) is under the bound
// ceil((total_in_flight + 1) × (1 + loadFactorEpsilon) / N), over this
// request's N candidates. The loads sum to total_in_flight, which is less
// than N × bound, so some endpoint is under it and the walk ends.
//
// Without a key (a completions request, a body that was not parsed) or
// with enabled: false, the model name's hash chooses on the same ring,
// without a bound: every request for a model goes to one endpoint, as the
// consistent-hash-picker would send it. A disabled instance warns when it
// is built (the configuration's warnings, or the log).
//
// Rings are cached per candidate set (scheduling.CandidateSetHash), the
// last few sets behind an atomic pointer; a request on a known set takes
// no lock. A new instance (a reload that changes loadFactorEpsilon or
// virtualNodes) builds its rings from its first request; the in-flight
// counts it reads live in the datastore and survive.
package prefixawarehash

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "prefix-aware-hash-picker"

// Defaults and bounds of the parameters.
const (
	DefaultLoadFactorEpsilon = 0.25
	DefaultMaxPrefixLength   = 1024
	DefaultVirtualNodes      = 150
	// MaxLoadFactorEpsilon bounds loadFactorEpsilon: beyond it the bound
	// never binds in practice.
	MaxLoadFactorEpsilon = 1000
	// MaxMaxPrefixLength bounds maxPrefixLength (1 MiB).
	MaxMaxPrefixLength = 1 << 20
	// MaxVirtualNodes bounds virtualNodes. A ring holds candidates ×
	// virtualNodes points of 12 bytes, and 8 rings are kept: 1000
	// endpoints at the default make 1.8 MB per ring.
	MaxVirtualNodes = 1000
)

// Params configures a prefix-aware-hash-picker.
type Params struct {
	pick.Params
	// Enabled turns prefix routing on (the Continuum Router's
	// prefix_routing.enabled). When false every request falls back to
	// the model name's hash, without a load bound, and the configuration
	// warns. Default true.
	Enabled bool `json:"enabled"`
	// LoadFactorEpsilon is ε in the bound ceil((total_in_flight + 1) ×
	// (1 + ε) / N): lower favours balance, higher favours affinity.
	// 0..1000; default 0.25.
	LoadFactorEpsilon float64 `json:"loadFactorEpsilon"`
	// MaxPrefixLength is how many bytes (UTF-8) of the system prompt or
	// first user message the key covers; longer text is cut at a
	// character boundary. 1..1048576; default 1024.
	MaxPrefixLength int `json:"maxPrefixLength"`
	// VirtualNodes is the number of points each candidate has on the
	// ring. 1..1000; default 150.
	VirtualNodes int `json:"virtualNodes"`
}

// DefaultParams returns the defaults of the Continuum Router: prefix
// routing on, ε 0.25, 1024 bytes, 150 virtual nodes, one endpoint.
func DefaultParams() Params {
	return Params{
		Params:            pick.DefaultParams(),
		Enabled:           true,
		LoadFactorEpsilon: DefaultLoadFactorEpsilon,
		MaxPrefixLength:   DefaultMaxPrefixLength,
		VirtualNodes:      DefaultVirtualNodes,
	}
}

// Validate reports every invalid parameter, each prefixed by its field
// path.
func (p *Params) Validate() error {
	errs := []error{p.Params.Validate()}
	if !(p.LoadFactorEpsilon >= 0 && p.LoadFactorEpsilon <= MaxLoadFactorEpsilon) {
		errs = append(errs, fmt.Errorf("loadFactorEpsilon: must be 0..%d, got %v", MaxLoadFactorEpsilon, p.LoadFactorEpsilon))
	}
	if p.MaxPrefixLength < 1 || p.MaxPrefixLength > MaxMaxPrefixLength {
		errs = append(errs, fmt.Errorf("maxPrefixLength: must be 1..%d bytes, got %d", MaxMaxPrefixLength, p.MaxPrefixLength))
	}
	if p.VirtualNodes < 1 || p.VirtualNodes > MaxVirtualNodes {
		errs = append(errs, fmt.Errorf("virtualNodes: must be 1..%d, got %d", MaxVirtualNodes, p.VirtualNodes))
	}
	return errors.Join(errs...)
}

// DisabledWarning is the warning for an instance named name whose prefix
// routing is disabled, "" when p enables it. New gives it to the
// configuration loader (or logs it) when it builds such an instance.
func DisabledWarning(name string, p Params) string {
	if p.Enabled {
		return ""
	}
	return fmt.Sprintf("%s %q: prefix routing is disabled (enabled: false): every request falls back to the model name's consistent hash without a load bound, so all requests for a model go to one endpoint; set enabled: true", Type, name)
}

// Picker is a prefix-aware-hash-picker instance. It is safe for
// concurrent use.
type Picker struct {
	pick.Base
	params Params
	log    logr.Logger
	now    func() time.Time

	cache   atomic.Pointer[ringCache]
	buildMu sync.Mutex   // serialises builds on a cache miss only
	builds  atomic.Int64 // rings built, for tests
	closed  atomic.Bool

	m    *metrics
	card *cardinality
}

// warner is implemented by handles that collect configuration warnings
// (the loader's, which reports them in `epp validate` and at start-up).
type warner interface{ Warn(msg string) }

// New returns a prefix-aware-hash-picker.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	return newWithClock(name, p, h, time.Now)
}

// newWithClock is New with the clock of the cardinality windows.
func newWithClock(name string, p Params, h scheduling.Handle, now func() time.Time) (*Picker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	base, err := pick.NewBase(Type, name, p.Params, h)
	if err != nil {
		return nil, err
	}
	name = base.TypedName().Name
	m, err := newMetrics(h.Registerer(), name)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	pk := &Picker{Base: base, params: p, log: h.Logger().WithValues("plugin", name), now: now, m: m}
	pk.cache.Store(&ringCache{})
	pk.card = newCardinality(CardinalityWindow, now)
	m.card.add(name, pk.card)
	if w := DisabledWarning(name, p); w != "" {
		if wr, ok := h.(warner); ok {
			wr.Warn(w)
		} else {
			pk.log.Info("Warning: " + w)
		}
	}
	return pk, nil
}

// EffectiveParams returns the parameters in effect.
func (p *Picker) EffectiveParams() any { return p.params }

// Bound returns the most requests an endpoint may have in flight and
// still take one more: ceil((totalInFlight + 1) × (1 + epsilon) / n), at
// least 1 (0 when n is 0). A value that is an integer but for
// floating-point rounding counts as that integer.
func Bound(totalInFlight int64, n int, epsilon float64) int64 {
	if n <= 0 {
		return 0
	}
	x := float64(max(totalInFlight, 0)+1) * (1 + epsilon) / float64(n)
	return max(int64(math.Ceil(x-1e-9)), 1)
}

// InFlight returns the requests the EPP has in flight at e (0 without
// load data).
func InFlight(e *scheduling.Endpoint) int64 {
	if l, ok := scheduling.LoadKey.Get(e); ok && l != nil {
		return max(l.InFlight(), 0)
	}
	return 0
}

// scratch is the per-request working memory, pooled.
type scratch struct {
	list  []*scheduling.Endpoint // for CandidateSetHash
	loads []int64                // by ring member
	pos   []int32                // ring member -> index in scored
	seen  []uint64               // bitset of members taken (fallbacks)
	key   []byte                 // the hashed key bytes
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Pick implements scheduling.Picker: the CHWBL walk for a request with a
// prefix key, the model's hash otherwise (see the package
// documentation). Fallbacks (maxNumOfEndpoints > 1) are the next distinct
// endpoints of the walk under the bound, then those over it, in ring
// order. Pick does not modify scored.
func (p *Picker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.PickInProfile(ctx, req, scored, scheduling.PickInfo{})
}

// PickInProfile implements scheduling.ProfilePicker: Pick, but a call that
// only orders fallbacks (info.FallbacksOnly) is not recorded: no
// requests or backend count, no prefix for the cardinality estimate, no
// log line.
func (p *Picker) PickInProfile(_ context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	n := len(scored)
	if n == 0 {
		return &scheduling.ProfileResult{}
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	r := p.ringFor(scored, s)
	pos, ok := r.positions(scored, s.pos)
	if !ok {
		// A cached ring's member is missing from the candidates only if
		// two sets collided on their 64-bit hash: use a ring of these.
		r = build(scored, 0, p.params.VirtualNodes)
		pos = nil
	} else if pos != nil {
		s.pos = pos
	}
	var key [32]byte
	hasKey := false
	if p.params.Enabled {
		key, hasKey = keyInto(req, p.params.MaxPrefixLength, &s.key)
	}
	var res *scheduling.ProfileResult
	strategy := StrategyModelHashFallback
	var bound int64
	if !hasKey {
		res = p.walkUnbounded(r, xxhash.Sum64String(ModelKey(req)), scored, pos, s)
	} else {
		loads := slices.Grow(s.loads[:0], n)[:n]
		s.loads = loads
		var total int64
		for j := range loads {
			loads[j] = InFlight(endpoint(scored, pos, j))
			total += loads[j]
		}
		bound = Bound(total, n, p.params.LoadFactorEpsilon)
		var overflow bool
		res, overflow = p.walkBounded(r, binary.BigEndian.Uint64(key[:8]), scored, pos, loads, bound, s)
		strategy = StrategyPrefixHash
		if overflow {
			strategy = StrategyBoundedOverflow
		}
		if !info.FallbacksOnly {
			p.card.add(p.now(), binary.BigEndian.Uint64(key[8:16]))
		}
	}
	if !info.FallbacksOnly {
		p.record(strategy, res.Targets[0], bound, req)
	}
	return res
}

// record counts a pick and logs it at V(4).
func (p *Picker) record(strategy string, target *scheduling.Endpoint, bound int64, req *scheduling.Request) {
	if p.closed.Load() {
		return // a closed instance no longer updates its series
	}
	switch strategy {
	case StrategyPrefixHash:
		p.m.byStrategy[0].Inc()
	case StrategyBoundedOverflow:
		p.m.byStrategy[1].Inc()
	default:
		p.m.byStrategy[2].Inc()
	}
	p.m.backends.Get(target.Name()).Inc()
	if l := p.log.V(4); l.Enabled() {
		id := ""
		if req != nil {
			id = req.ID
		}
		l.Info("Prefix-aware hash pick", "strategy", strategy, "endpoint", target.String(), "bound", bound, "request", id)
	}
}

// endpoint returns the candidate that is ring member j.
func endpoint(scored []scheduling.ScoredEndpoint, pos []int32, j int) *scheduling.Endpoint {
	if pos == nil {
		return scored[j].Endpoint
	}
	return scored[pos[j]].Endpoint
}

// walkUnbounded returns the owner of the first point at or after h, then
// the next distinct owners clockwise: consistent hashing.
func (p *Picker) walkUnbounded(r *ring, h uint64, scored []scheduling.ScoredEndpoint, pos []int32, s *scratch) *scheduling.ProfileResult {
	at := r.start(h)
	if p.Max == 1 || len(scored) == 1 {
		return pick.Single(endpoint(scored, pos, int(r.owners[at])))
	}
	k := min(p.Max, len(scored))
	seen := s.bitset(len(scored))
	targets := make([]*scheduling.Endpoint, 0, k)
	for step := 0; step < len(r.points) && len(targets) < k; step++ {
		j := int(r.owners[(at+step)%len(r.points)])
		if !take(seen, j) {
			targets = append(targets, endpoint(scored, pos, j))
		}
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// walkBounded walks clockwise from the first point at or after h to the
// first owner with loads[owner] < bound. overflow reports that the first
// owner was at the bound. Fallbacks are the next distinct owners under
// the bound, then the first distinct ones over it.
func (p *Picker) walkBounded(r *ring, h uint64, scored []scheduling.ScoredEndpoint, pos []int32, loads []int64, bound int64, s *scratch) (*scheduling.ProfileResult, bool) {
	at := r.start(h)
	overflow := loads[r.owners[at]] >= bound
	np := len(r.points)
	if p.Max == 1 || len(scored) == 1 {
		for step := range np {
			if j := int(r.owners[(at+step)%np]); loads[j] < bound {
				return pick.Single(endpoint(scored, pos, j)), overflow
			}
		}
		// Unreachable: the loads sum to less than N × bound. Keep the
		// least loaded should a caller break that.
		return pick.Single(endpoint(scored, pos, argmin(loads))), true
	}
	k := min(p.Max, len(scored))
	seen := s.bitset(len(scored))
	under := make([]*scheduling.Endpoint, 0, k)
	var over []*scheduling.Endpoint
	for step := 0; step < np && len(under) < k; step++ {
		j := int(r.owners[(at+step)%np])
		if take(seen, j) {
			continue
		}
		switch {
		case loads[j] < bound:
			under = append(under, endpoint(scored, pos, j))
		case len(over) < k:
			over = append(over, endpoint(scored, pos, j))
		}
	}
	for _, e := range over {
		if len(under) == k {
			break
		}
		under = append(under, e)
	}
	return &scheduling.ProfileResult{Targets: under}, overflow
}

func argmin(loads []int64) int {
	best := 0
	for j, l := range loads {
		if l < loads[best] {
			best = j
		}
	}
	return best
}

// bitset returns a cleared bitset of n bits from the scratch.
func (s *scratch) bitset(n int) []uint64 {
	w := (n + 63) / 64
	s.seen = slices.Grow(s.seen[:0], w)[:w]
	clear(s.seen)
	return s.seen
}

// take sets bit j and reports whether it was already set.
func take(bits []uint64, j int) bool {
	w, b := j/64, uint64(1)<<(j%64)
	if bits[w]&b != 0 {
		return true
	}
	bits[w] |= b
	return false
}

// ringFor returns the ring of the candidates, from the cache or built.
func (p *Picker) ringFor(scored []scheduling.ScoredEndpoint, s *scratch) *ring {
	list := slices.Grow(s.list[:0], len(scored))
	for i := range scored {
		list = append(list, scored[i].Endpoint)
	}
	set := scheduling.CandidateSetHash(list)
	clear(list) // the pool must not keep endpoints alive
	s.list = list[:0]
	if r := p.cache.Load().lookup(set, len(scored)); r != nil {
		return r
	}
	if p.closed.Load() {
		p.builds.Add(1)
		return build(scored, set, p.params.VirtualNodes) // closed: cache nothing more
	}
	p.buildMu.Lock()
	defer p.buildMu.Unlock()
	c := p.cache.Load()
	if r := c.lookup(set, len(scored)); r != nil {
		return r // built while this request waited
	}
	r := build(scored, set, p.params.VirtualNodes)
	p.builds.Add(1)
	if !p.closed.Load() {
		p.cache.Store(c.with(r))
	}
	if l := p.log.V(4); l.Enabled() {
		l.Info("Prefix-aware hash ring built", "endpoints", len(scored), "points", len(r.points))
	}
	return r
}

// Close implements scheduling.Closer: it drops the cached rings and the
// instance's cardinality sketch, and deletes the instance's series unless
// an instance of the same name serves on. Requests still running on the
// old configuration build uncached rings and update no series.
func (p *Picker) Close(info scheduling.CloseInfo) {
	p.closed.Store(true)
	p.cache.Store(&ringCache{})
	name := p.TypedName().Name
	p.m.card.remove(name, p.card)
	if !info.Successor {
		p.m.deleteSeries(name)
	}
}

// Registration registers the prefix-aware-hash-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker        = (*Picker)(nil)
	_ scheduling.ProfilePicker = (*Picker)(nil)
	_ scheduling.Closer        = (*Picker)(nil)
)
