// Package maxscore provides the max-score-picker: it returns the endpoints
// with the highest total score, highest first, breaking ties uniformly at
// random.
//
// GIE v1.5 shuffles the scored endpoints and then stable-sorts them by score;
// this picker returns the same distribution of results without sorting: one
// pass with reservoir sampling over the tied best when one endpoint is
// wanted, and an expected linear-time partial selection when more are.
package maxscore

import (
	"context"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "max-score-picker"

// Params configures a max-score-picker: MaxNumOfEndpoints endpoints are
// returned, the primary target first, then fallbacks in descending score
// order.
type Params = pick.Params

// DefaultParams returns the default parameters: one endpoint.
func DefaultParams() Params { return pick.DefaultParams() }

// Picker is a max-score-picker instance. It is safe for concurrent use.
type Picker struct {
	pick.Base
}

// New returns a max-score-picker. Its randomness comes from h.Rand(name).
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	base, err := pick.NewBase(Type, name, p, h)
	if err != nil {
		return nil, err
	}
	return &Picker{Base: base}, nil
}

// Pick implements scheduling.Picker. It returns up to MaxNumOfEndpoints
// endpoints in descending score order; endpoints with equal scores come in
// a uniformly random order. A NaN score ranks below every other score.
// Pick may reorder scored.
func (p *Picker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	switch {
	case len(scored) == 0:
		return &scheduling.ProfileResult{}
	case p.Max == 1:
		return pick.Single(scored[p.pickOne(scored)].Endpoint)
	}
	k := min(p.Max, len(scored))
	pick.SelectTop(p.Rng, scored, k)
	return pick.Result(scored[:k])
}

// pickOne returns the index of a best-scored endpoint, chosen uniformly
// among the tied best by reservoir sampling: the c-th tie seen replaces the
// current choice with probability 1/c. Randomness is drawn only on ties.
func (p *Picker) pickOne(scored []scheduling.ScoredEndpoint) int {
	best, bestRank, ties := 0, pick.Rank(scored[0].Score), 1
	for i := 1; i < len(scored); i++ {
		r := pick.Rank(scored[i].Score)
		switch {
		case r > bestRank:
			best, bestRank, ties = i, r, 1
		case r == bestRank:
			ties++
			if p.Rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// Registration registers the max-score-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Picker = (*Picker)(nil)
