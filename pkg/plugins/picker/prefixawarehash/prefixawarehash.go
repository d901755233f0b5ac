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
// The loads are read live, one atomic counter per candidate at the start
// of the pick, without a lock or a reservation: the ext_proc server counts
// the request after scheduling returns. The bound is exact for picks that
// do not overlap; C overlapping picks that prefer the same endpoint can
// leave it at most C − 1 above the bound until the next pick, which sees
// their counts (see the README).
//
// Without a key (a completions request, a body that was not parsed) or
// with enabled: false, the model name's hash chooses on the same ring,
// without a bound: every request for a model goes to one endpoint, as the
// consistent-hash-picker would send it. A disabled instance warns when it
// is built (the configuration's warnings, or the log).
//
// The ring is built over a superset of the candidates (every endpoint
// seen as a candidate recently: the pool) and cached; a request walks it
// skipping the endpoints that are not its candidates and visiting each
// candidate once, however many virtual nodes it has (internal/hashring),
// which gives exactly the walk over a ring of the candidates alone. So
// filters that narrow the candidates per request cost no build; the ring
// is rebuilt only when an endpoint that is not on it becomes a candidate,
// and a request takes no lock otherwise. A new instance (a reload that
// changes loadFactorEpsilon or virtualNodes) builds its ring from its
// first request; the in-flight counts it reads live in the datastore and
// survive.
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

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/hashring"
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
	// MaxVirtualNodes bounds virtualNodes. The one ring over the pool
	// (hashring.Cache) holds members × virtualNodes points of about 16
	// bytes: 1000 endpoints at the default make about 2.4 MB.
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

	rings  *hashring.Cache
	closed atomic.Bool

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
	pk.rings = hashring.NewCache(p.VirtualNodes, nil, func(members, points int) {
		if l := pk.log.V(4); l.Enabled() {
			l.Info("Prefix-aware hash ring built", "endpoints", members, "points", points)
		}
	})
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
	view  hashring.View // the candidates on the ring, and the walk
	loads []int64       // by index in scored
	key   []byte        // the hashed key bytes
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
	defer func() { s.view.Release(); scratchPool.Put(s) }()
	v := &s.view
	p.rings.View(scored, v)
	var key [32]byte
	hasKey := false
	if p.params.Enabled {
		key, hasKey = keyInto(req, p.params.MaxPrefixLength, &s.key)
	}
	var res *scheduling.ProfileResult
	strategy := StrategyModelHashFallback
	var bound int64
	if !hasKey {
		res = p.walkUnbounded(v, xxhash.Sum64String(ModelKey(req)), scored)
	} else {
		loads := slices.Grow(s.loads[:0], n)[:n]
		s.loads = loads
		var total int64
		for i := range loads {
			loads[i] = InFlight(scored[i].Endpoint)
			total += loads[i]
		}
		bound = Bound(total, n, p.params.LoadFactorEpsilon)
		var overflow bool
		res, overflow = p.walkBounded(v, binary.BigEndian.Uint64(key[:8]), scored, loads, bound)
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

// walkUnbounded returns the first candidate clockwise of h, then the next
// distinct ones: consistent hashing.
func (p *Picker) walkUnbounded(v *hashring.View, h uint64, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	v.Start(h)
	if p.Max == 1 || len(scored) == 1 {
		return pick.Single(scored[v.Next()].Endpoint)
	}
	k := min(p.Max, v.Candidates())
	targets := make([]*scheduling.Endpoint, 0, k)
	for i := v.Next(); i >= 0 && len(targets) < k; i = v.Next() {
		targets = append(targets, scored[i].Endpoint)
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// walkBounded walks the candidates clockwise from h, each once, to the
// first with loads[i] < bound. overflow reports that the first was at the
// bound. Fallbacks are the next candidates under the bound, then the
// first ones over it.
func (p *Picker) walkBounded(v *hashring.View, h uint64, scored []scheduling.ScoredEndpoint, loads []int64, bound int64) (*scheduling.ProfileResult, bool) {
	v.Start(h)
	first := v.Next()
	overflow := loads[first] >= bound
	if p.Max == 1 || len(scored) == 1 {
		for i := first; i >= 0; i = v.Next() {
			if loads[i] < bound {
				return pick.Single(scored[i].Endpoint), overflow
			}
		}
		// Unreachable: the loads sum to less than N × bound. Keep the
		// least loaded should a caller break that.
		return pick.Single(scored[argmin(loads)].Endpoint), true
	}
	k := min(p.Max, v.Candidates())
	under := make([]*scheduling.Endpoint, 0, k)
	var over []*scheduling.Endpoint
	for i := first; i >= 0 && len(under) < k; i = v.Next() {
		switch {
		case loads[i] < bound:
			under = append(under, scored[i].Endpoint)
		case len(over) < k:
			over = append(over, scored[i].Endpoint)
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

// Close implements scheduling.Closer: it drops the cached rings and the
// instance's cardinality sketch, and deletes the instance's series unless
// an instance of the same name serves on. Requests still running on the
// old configuration build uncached rings and update no series.
func (p *Picker) Close(info scheduling.CloseInfo) {
	p.closed.Store(true)
	p.rings.Close()
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
