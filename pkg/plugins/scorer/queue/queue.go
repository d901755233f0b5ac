// Package queue implements the queue-scorer, which prefers endpoints with
// shorter waiting queues.
//
// The score is GIE's min-max normalisation of the waiting queue size over
// the candidates: (max − q) / (max − min). The shortest queue scores 1, the
// longest 0; when every candidate has the same queue size all score 1.
package queue

import (
	"context"

	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/internal/minmax"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "queue-scorer"

// Params is the scorer's parameters: it takes none.
type Params = scheduling.NoParams

// DefaultParams returns the default parameters.
func DefaultParams() Params { return Params{} }

// Scorer scores endpoints by their waiting queue size. It is stateless and
// safe for concurrent use.
type Scorer struct {
	typedName scheduling.TypedName
}

// New returns a queue scorer named name.
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
	minmax.Score(endpoints, scores, waitingQueueSize)
}

// waitingQueueSize is the metric the scorer normalises.
func waitingQueueSize(e *scheduling.Endpoint) int { return e.Metrics().WaitingQueueSize }

// Registration registers the queue-scorer type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Scorer = (*Scorer)(nil)
