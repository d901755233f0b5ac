// Package random provides the random-picker: it returns endpoints chosen
// uniformly at random, without replacement, ignoring their scores.
//
// GIE v1.5 shuffles all the scored endpoints and takes the first N; this
// picker draws the same distribution with one random number for one
// endpoint, and a partial Fisher-Yates shuffle of N steps for more.
package random

import (
	"context"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "random-picker"

// Params configures a random-picker: MaxNumOfEndpoints distinct endpoints
// are returned, the primary target first, then fallbacks, in random order.
type Params = pick.Params

// DefaultParams returns the default parameters: one endpoint.
func DefaultParams() Params { return pick.DefaultParams() }

// Picker is a random-picker instance. It is safe for concurrent use.
type Picker struct {
	pick.Base
}

// New returns a random-picker. Its randomness comes from h.Rand(name).
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	base, err := pick.NewBase(Type, name, p, h)
	if err != nil {
		return nil, err
	}
	return &Picker{Base: base}, nil
}

// Pick implements scheduling.Picker. Every ordered selection of
// min(MaxNumOfEndpoints, len(scored)) distinct endpoints is equally likely.
// Pick may reorder scored.
func (p *Picker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	n := len(scored)
	switch {
	case n == 0:
		return &scheduling.ProfileResult{}
	case p.Max == 1:
		return pick.Single(scored[p.Rng.IntN(n)].Endpoint)
	}
	k := min(p.Max, n)
	for i := range k { // partial Fisher-Yates shuffle
		j := i + p.Rng.IntN(n-i)
		scored[i], scored[j] = scored[j], scored[i]
	}
	return pick.Result(scored[:k])
}

// Registration registers the random-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Picker = (*Picker)(nil)
