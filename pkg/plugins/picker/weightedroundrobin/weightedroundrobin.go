// Package weightedroundrobin provides the weighted-round-robin-picker, the
// WeightedRoundRobin selection strategy (Continuum Router, C-11): each
// request draws its endpoint at random with a probability proportional to
// the endpoint's weight, so a weight-3 endpoint gets three times the
// requests of a weight-1 one on average, without the fixed 3, 3, 3, 1
// sequence of a classic weighted round robin (the reading of the seed's
// section 3.5, #1).
//
// Weights come from the endpoint data (scheduling.WeightKey: the
// endpoints file's weight, or the pod annotation); an endpoint without one
// weighs 1. An endpoint whose weight is 0 or less is never drawn, as
// primary or fallback, while any candidate has a positive weight; when
// none has, the picker walks the candidates in round robin. Scores are
// ignored.
package weightedroundrobin

import (
	"context"
	"math"
	"slices"
	"sync"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "weighted-round-robin-picker"

// Params configures a weighted-round-robin-picker: up to
// MaxNumOfEndpoints distinct endpoints are returned, each further one
// drawn by weight from those not drawn yet.
type Params = pick.Params

// DefaultParams returns the default parameters: one endpoint.
func DefaultParams() Params { return pick.DefaultParams() }

// maxWeight caps a weight so that the sum of any realistic number of them
// fits in 64 bits (the datastore accepts weights up to 1,000,000).
const maxWeight = math.MaxUint32

// Picker is a weighted-round-robin-picker instance. It is safe for
// concurrent use.
type Picker struct {
	pick.Base
	turn pick.Rotation // for the all-weights-zero case
}

// New returns a weighted-round-robin-picker. Its randomness comes from
// h.Rand(name), so a seeded host draws the same sequence.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	base, err := pick.NewBase(Type, name, p, h)
	if err != nil {
		return nil, err
	}
	return &Picker{Base: base}, nil
}

// weight returns e's weight for the draw: its WeightKey (1 when absent),
// 0 when not positive, capped at maxWeight.
func weight(e *scheduling.Endpoint) uint64 {
	w, ok := scheduling.WeightKey.Get(e)
	switch {
	case !ok:
		return 1
	case w <= 0:
		return 0
	case uint64(w) > maxWeight:
		return maxWeight
	}
	return uint64(w)
}

// weightPool holds the per-request weight scratch slices.
var weightPool = sync.Pool{New: func() any { return new([]uint64) }}

// Pick implements scheduling.Picker. The primary target is endpoint i with
// probability w_i / Σw; each fallback is drawn the same way from the
// positive-weight endpoints not drawn yet, so fewer than
// MaxNumOfEndpoints come back when fewer have a positive weight. With no
// positive weight, Pick is round robin over scored. Pick does not modify
// scored.
func (p *Picker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.PickInProfile(ctx, req, scored, scheduling.PickInfo{})
}

// PickInProfile implements scheduling.ProfilePicker: Pick, but a call that
// only orders fallbacks (info.FallbacksOnly) does not advance the round-robin counter of the all-weights-zero case.
func (p *Picker) PickInProfile(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	n := len(scored)
	if n == 0 {
		return &scheduling.ProfileResult{}
	}
	buf := weightPool.Get().(*[]uint64)
	defer weightPool.Put(buf)
	w := slices.Grow((*buf)[:0], n)[:n]
	*buf = w
	var total uint64
	positive := 0
	for i := range scored {
		w[i] = weight(scored[i].Endpoint)
		if w[i] > 0 {
			total += w[i]
			positive++
		}
	}
	if total == 0 {
		return pick.Rotated(scored, p.turn.Turn(info), p.Max)
	}
	if p.Max == 1 {
		return pick.Single(scored[draw(w, p.Rng.Uint64N(total))].Endpoint)
	}
	k := min(p.Max, positive)
	targets := make([]*scheduling.Endpoint, k)
	for j := range targets {
		i := draw(w, p.Rng.Uint64N(total))
		targets[j] = scored[i].Endpoint
		total -= w[i]
		w[i] = 0 // drawn: not again
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// draw returns the index whose cumulative weight interval holds u
// (0 <= u < Σw).
func draw(w []uint64, u uint64) int {
	last := 0
	for i, x := range w {
		if x == 0 {
			continue
		}
		if u < x {
			return i
		}
		u -= x
		last = i
	}
	return last // unreachable while u < Σw
}

// Registration registers the weighted-round-robin-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker        = (*Picker)(nil)
	_ scheduling.ProfilePicker = (*Picker)(nil)
)
