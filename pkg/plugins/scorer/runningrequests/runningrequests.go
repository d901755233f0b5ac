// Package runningrequests implements the running-requests-size-scorer, which
// prefers endpoints decoding fewer requests.
//
// The score is GIE's min-max normalisation of the running requests over the
// candidates: (max − r) / (max − min). The least busy endpoint scores 1, the
// busiest 0; when every candidate runs the same number of requests all
// score 1.
package runningrequests

import (
	"context"

	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/internal/minmax"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "running-requests-size-scorer"

// Params is the scorer's parameters: it takes none.
type Params = scheduling.NoParams

// DefaultParams returns the default parameters.
func DefaultParams() Params { return Params{} }

// Scorer scores endpoints by their number of running requests. It is stateless and
// safe for concurrent use.
type Scorer struct {
	typedName scheduling.TypedName
}

// New returns a running-requests scorer named name.
func New(name string, _ Params, _ scheduling.Handle) (*Scorer, error) {
	if name == "" {
		name = Type
	}
	return &Scorer{typedName: scheduling.TypedName{Type: Type, Name: name}}, nil
}

// TypedName implements scheduling.Plugin.
func (s *Scorer) TypedName() scheduling.TypedName { return s.typedName }

// Category implements scheduling.Scorer.
func (s *Scorer) Category() scheduling.ScorerCategory { return scheduling.Distribution }

// Score implements scheduling.Scorer.
func (s *Scorer) Score(_ context.Context, _ *scheduling.Request, endpoints []*scheduling.Endpoint, scores []float64) {
	minmax.Score(endpoints, scores, runningRequestsSize)
}

// runningRequestsSize is the metric the scorer normalises.
func runningRequestsSize(e *scheduling.Endpoint) int { return e.Metrics().RunningRequestsSize }

// Registration registers the running-requests-size-scorer type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Scorer = (*Scorer)(nil)
