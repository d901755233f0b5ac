// Package weightedrandom provides the weighted-random-picker: it returns
// endpoints drawn at random without replacement, each with a probability
// proportional to its total score.
//
// As in GIE v1.5 it uses A-Res weighted reservoir sampling: every endpoint
// with a positive score s gets the key U^(1/s), U uniform in (0, 1), and the
// endpoints with the largest keys win. Endpoints scored zero come after every
// positively scored one (they only fill places the positive ones cannot),
// and when no score is positive the pick is uniformly random, like the
// random-picker.
//
// To pick several endpoints the picker ranks them by ln(U)/s = -E/s, E
// exponentially distributed, rather than by U^(1/s): the order is the same,
// but small scores no longer underflow U^(1/s) to zero and tie; the best
// keys are found by an expected linear-time partial selection, not a sort.
// To pick one, which A-Res draws with probability s/Σs, it inverts the
// cumulative scores instead: two passes and a single random number.
package weightedrandom

import (
	"context"
	"math"
	"slices"
	"sync"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "weighted-random-picker"

// Params configures a weighted-random-picker: MaxNumOfEndpoints distinct
// endpoints are returned, the primary target first, then fallbacks in the
// order they were drawn.
type Params = pick.Params

// DefaultParams returns the default parameters: one endpoint.
func DefaultParams() Params { return pick.DefaultParams() }

// Picker is a weighted-random-picker instance. It is safe for concurrent
// use.
type Picker struct {
	pick.Base
}

// New returns a weighted-random-picker. Its randomness comes from
// h.Rand(name).
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	base, err := pick.NewBase(Type, name, p, h)
	if err != nil {
		return nil, err
	}
	return &Picker{Base: base}, nil
}

// Pick implements scheduling.Picker. The first target is endpoint i with
// probability s_i / Σs; each further target is drawn the same way from the
// endpoints not yet drawn. Endpoints whose score is zero (or NaN) are drawn
// only once every positively scored endpoint has been, uniformly among
// themselves. Pick does not modify scored.
func (p *Picker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	n := len(scored)
	switch {
	case n == 0:
		return &scheduling.ProfileResult{}
	case p.Max == 1:
		return pick.Single(scored[p.pickOne(scored)].Endpoint)
	}
	k := min(p.Max, n)
	buf := keyPool.Get().(*[]scheduling.ScoredEndpoint)
	keys := slices.Grow((*buf)[:0], n)[:n]
	for i := range scored {
		keys[i] = scheduling.ScoredEndpoint{Endpoint: scored[i].Endpoint, Score: p.key(scored[i].Score)}
	}
	// Keys are never NaN, so SelectTop's NaN rule does not apply.
	pick.SelectTop(p.Rng, keys, k)
	res := pick.Result(keys[:k])
	clear(keys) // drop endpoint references held by the pool
	*buf = keys[:0]
	keyPool.Put(buf)
	return res
}

// pickOne returns the index of one endpoint drawn with probability
// proportional to its score, or a uniformly random index when no score is
// positive. For one endpoint A-Res is the same draw as inverting the
// cumulative scores, which needs one random number instead of one per
// endpoint.
func (p *Picker) pickOne(scored []scheduling.ScoredEndpoint) int {
	total := 0.0
	for i := range scored {
		if s := scored[i].Score; s > 0 { // skips zero, negative and NaN
			total += s
		}
	}
	switch {
	case total == 0:
		return p.Rng.IntN(len(scored))
	case math.IsInf(total, 1):
		return p.race(scored)
	}
	u := p.Rng.Float64() * total
	cum, last := 0.0, 0
	for i := range scored {
		if s := scored[i].Score; s > 0 {
			// The partial sums are those of the first pass, so the last one
			// equals total > u unless rounding interferes.
			if cum += s; cum > u {
				return i
			}
			last = i
		}
	}
	return last
}

// race returns the index with the largest A-Res key among positive scores,
// in one pass; it is used when the scores overflow their sum.
func (p *Picker) race(scored []scheduling.ScoredEndpoint) int {
	best, bestKey := -1, math.Inf(1)
	for i := range scored {
		s := scored[i].Score
		if !(s > 0) {
			continue
		}
		// E/s is smallest where ln(U)/s = -E/s, and so U^(1/s), is largest.
		if k := p.Rng.ExpFloat64() / s; best < 0 || k < bestKey {
			best, bestKey = i, k
		}
	}
	return best
}

// key is the sampling key of a score: ln(U)/s for a positive score, -Inf
// (below every positive score's key) otherwise.
func (p *Picker) key(s float64) float64 {
	if !(s > 0) {
		return math.Inf(-1)
	}
	return -p.Rng.ExpFloat64() / s
}

// keyPool holds scratch slices for the keys of multi-endpoint picks.
var keyPool = sync.Pool{New: func() any { return new([]scheduling.ScoredEndpoint) }}

// Registration registers the weighted-random-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Picker = (*Picker)(nil)
