// Package kvcache implements the kv-cache-utilization-scorer, which prefers
// endpoints with free KV cache.
//
// The score is GIE's 1 − usage, where usage is the endpoint's KV cache usage
// as a fraction in [0, 1]. A usage reported above 1 gives a negative score,
// which the framework clamps to 0, as GIE's profile does.
package kvcache

import (
	"context"

	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/internal/minmax"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "kv-cache-utilization-scorer"

// Params is the scorer's parameters: it takes none.
type Params = scheduling.NoParams

// DefaultParams returns the default parameters.
func DefaultParams() Params { return Params{} }

// Scorer scores endpoints by their free KV cache. It is stateless and safe
// for concurrent use.
type Scorer struct {
	typedName scheduling.TypedName
}

// New returns a KV cache utilization scorer named name.
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
	// An endpoint that is not scraped (never measured) scores 0 next to
	// measured ones, never as an empty cache (see minmax.Measured).
	mixed := minmax.Measured(endpoints)
	for i, e := range endpoints {
		if mixed && e.Metrics().UpdateTime.IsZero() {
			scores[i] = 0
			continue
		}
		scores[i] = 1 - e.Metrics().KVCacheUsagePercent
	}
}

// Registration registers the kv-cache-utilization-scorer type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Scorer = (*Scorer)(nil)
