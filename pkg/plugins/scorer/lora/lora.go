// Package lora implements the lora-affinity-scorer, which prefers endpoints
// that already serve, or can quickly load, the request's LoRA adapter.
//
// For the request's target model (Request.TargetModel) each endpoint scores,
// checking the conditions in GIE's order:
//
//   - 1.0 when the adapter is active on the endpoint;
//   - 0.8 when the endpoint has a free adapter slot (active + waiting
//     adapters < MaxActiveModels), even if the adapter is also waiting;
//   - 0.6 when the adapter is waiting to be loaded on a full endpoint;
//   - 0 otherwise.
package lora

import (
	"context"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "lora-affinity-scorer"

// Scores given by the scorer, as in GIE.
const (
	ScoreActive     = 1.0
	ScoreFreeSlot   = 0.8
	ScoreWaiting    = 0.6
	ScoreNoAffinity = 0.0
)

// Params is the scorer's parameters: it takes none.
type Params = scheduling.NoParams

// DefaultParams returns the default parameters.
func DefaultParams() Params { return Params{} }

// Scorer scores endpoints by LoRA adapter affinity. It is stateless and safe
// for concurrent use.
type Scorer struct {
	typedName scheduling.TypedName
}

// New returns a LoRA affinity scorer named name.
func New(name string, _ Params, _ scheduling.Handle) (*Scorer, error) {
	if name == "" {
		name = Type
	}
	return &Scorer{typedName: scheduling.TypedName{Type: Type, Name: name}}, nil
}

// TypedName implements scheduling.Plugin.
func (s *Scorer) TypedName() scheduling.TypedName { return s.typedName }

// Category implements scheduling.Scorer.
func (s *Scorer) Category() scheduling.ScorerCategory { return scheduling.Affinity }

// Score implements scheduling.Scorer.
func (s *Scorer) Score(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint, scores []float64) {
	var target string
	if req != nil {
		target = req.TargetModel
	}
	for i, e := range endpoints {
		m := e.Metrics()
		_, active := m.ActiveModels[target]
		_, waiting := m.WaitingModels[target]
		switch {
		case active:
			scores[i] = ScoreActive
		case len(m.ActiveModels)+len(m.WaitingModels) < m.MaxActiveModels:
			scores[i] = ScoreFreeSlot
		case waiting:
			scores[i] = ScoreWaiting
		default:
			scores[i] = ScoreNoAffinity
		}
	}
}

// Registration registers the lora-affinity-scorer type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Scorer = (*Scorer)(nil)
