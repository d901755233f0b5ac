// Package tokenload implements the token-load-scorer, which prefers
// endpoints with fewer estimated in-flight tokens.
//
// It reads the in-flight load (scheduling.InFlightLoadKey) that the
// inflight-load-producer sets on every request and scores each endpoint, as
// in GIE v1.5:
//
//	score = 1 − min(tokens, queueThresholdTokens) / queueThresholdTokens
//
// An endpoint with no tokens in flight, or a request without the in-flight
// view, scores 1. With the producer's default accounting the tokens are
// GIE v1.5's too (input plus 1.5 times as many output tokens per request,
// from scheduling to the end of the response), so the scores match GIE's.
package tokenload

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "token-load-scorer"

// ProducerType is the data producer the scorer needs; the configuration
// loader adds one when none is configured.
const ProducerType = "inflight-load-producer"

// DefaultQueueThresholdTokens is GIE's default normalisation threshold:
// 128 requests of 32K tokens.
const DefaultQueueThresholdTokens = 4194304

// Params is the scorer's parameters.
type Params struct {
	// QueueThresholdTokens is the number of in-flight tokens at which an
	// endpoint scores 0; fewer tokens score linearly higher, up to 1 for
	// none. Default 4194304 (128 requests of 32K tokens); must be > 0.
	QueueThresholdTokens int64 `json:"queueThresholdTokens"`
}

// DefaultParams returns GIE's defaults.
func DefaultParams() Params {
	return Params{QueueThresholdTokens: DefaultQueueThresholdTokens}
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	if p.QueueThresholdTokens <= 0 {
		errs = append(errs, fmt.Errorf("queueThresholdTokens: must be > 0, got %d", p.QueueThresholdTokens))
	}
	return errors.Join(errs...)
}

// Scorer scores endpoints by their in-flight tokens. It is stateless and
// safe for concurrent use.
type Scorer struct {
	typedName scheduling.TypedName
	threshold float64
}

// New returns a token load scorer named name.
func New(name string, p Params, _ scheduling.Handle) (*Scorer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	return &Scorer{
		typedName: scheduling.TypedName{Type: Type, Name: name},
		threshold: float64(p.QueueThresholdTokens),
	}, nil
}

// TypedName implements scheduling.Plugin.
func (s *Scorer) TypedName() scheduling.TypedName { return s.typedName }

// Category implements scheduling.Scorer.
func (s *Scorer) Category() scheduling.ScorerCategory { return scheduling.Distribution }

// Consumes implements scheduling.DataConsumer.
func (s *Scorer) Consumes() []string { return []string{scheduling.InFlightLoadKey.Name()} }

// DefaultProducer implements scheduling.DefaultProducer: the in-flight load
// comes from an inflight-load-producer with default parameters.
func (s *Scorer) DefaultProducer(key string) (pluginType string, params []byte, ok bool) {
	if key == scheduling.InFlightLoadKey.Name() {
		return ProducerType, nil, true
	}
	return "", nil, false
}

// Score implements scheduling.Scorer.
func (s *Scorer) Score(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint, scores []float64) {
	var load scheduling.InFlightLoad
	if req != nil {
		load, _ = scheduling.InFlightLoadKey.Get(req)
	}
	for i, e := range endpoints {
		var tokens int64
		if load != nil {
			_, tokens = load.InFlight(e.Key())
		}
		if tokens <= 0 {
			scores[i] = 1
			continue
		}
		scores[i] = 1 - min(float64(tokens), s.threshold)/s.threshold
	}
}

// Registration registers the token-load-scorer type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Scorer          = (*Scorer)(nil)
	_ scheduling.DataConsumer    = (*Scorer)(nil)
	_ scheduling.DefaultProducer = (*Scorer)(nil)
)
