// Package activerequest implements llm-d's active-request-scorer, which
// prefers endpoints with fewer requests in flight from this picker.
//
// It reads the in-flight request counts (scheduling.InFlightLoadKey) that
// the inflight-load-producer sets on every request. As in llm-d, with c an
// endpoint's count and maxCount the largest count among the candidates:
//
//	c <= idleThreshold:  score = 1
//	otherwise:           score = (maxCount − c) / maxCount × maxBusyScore
//
// Idle endpoints always score 1; busy ones are scaled into [0,
// maxBusyScore], the busiest scoring 0. A maxBusyScore below 1 opens a gap
// that keeps any idle endpoint ahead of every busy one. Without in-flight
// data every endpoint counts as idle.
package activerequest

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "active-request-scorer"

// ProducerType is the data producer the scorer needs; the configuration
// loader adds one when none is configured.
const ProducerType = "inflight-load-producer"

// Params is the scorer's parameters.
type Params struct {
	// IdleThreshold is the largest number of in-flight requests at which an
	// endpoint still counts as idle and scores 1. Default 0 (only endpoints
	// with no request in flight are idle); must be >= 0.
	IdleThreshold int `json:"idleThreshold"`
	// MaxBusyScore is the score of the least busy non-idle endpoint (had it
	// no requests); busier endpoints score proportionally less, the busiest
	// 0. Default 1 (no gap between idle and busy endpoints); must be in
	// [0, 1].
	MaxBusyScore float64 `json:"maxBusyScore"`
	// RequestTimeout is deprecated and ignored: llm-d once expired its own
	// request records after this long, but in-flight requests are now
	// counted by the inflight-load-producer, which releases each request
	// exactly once when its response completes or the client disconnects,
	// so no timeout is needed. Accepted so that existing configurations
	// load; setting it logs a warning.
	RequestTimeout string `json:"requestTimeout,omitempty"`
}

// DefaultParams returns llm-d's defaults.
func DefaultParams() Params {
	return Params{IdleThreshold: 0, MaxBusyScore: 1}
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	if p.IdleThreshold < 0 {
		errs = append(errs, fmt.Errorf("idleThreshold: must be >= 0, got %d", p.IdleThreshold))
	}
	if !(p.MaxBusyScore >= 0 && p.MaxBusyScore <= 1) {
		errs = append(errs, fmt.Errorf("maxBusyScore: must be in [0, 1], got %v", p.MaxBusyScore))
	}
	return errors.Join(errs...)
}

// Scorer scores endpoints by their in-flight requests. It is stateless and
// safe for concurrent use.
type Scorer struct {
	typedName     scheduling.TypedName
	idleThreshold int64
	maxBusyScore  float64
}

// New returns an active request scorer named name.
func New(name string, p Params, h scheduling.Handle) (*Scorer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	if p.RequestTimeout != "" && h != nil {
		h.Logger().Info("requestTimeout is deprecated and ignored: in-flight requests are released by the inflight-load-producer when they complete",
			"plugin", name, "requestTimeout", p.RequestTimeout)
	}
	return &Scorer{
		typedName:     scheduling.TypedName{Type: Type, Name: name},
		idleThreshold: int64(p.IdleThreshold),
		maxBusyScore:  p.MaxBusyScore,
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
	if load == nil {
		for i := range endpoints {
			scores[i] = 1
		}
		return
	}
	// First pass: keep each count in its score slot (exact below 2^53) so
	// the view is read once per endpoint without a scratch allocation.
	var maxCount int64
	for i, e := range endpoints {
		c, _ := load.InFlight(e.Key())
		c = max(c, 0)
		scores[i] = float64(c)
		maxCount = max(maxCount, c)
	}
	for i := range endpoints {
		c := int64(scores[i])
		if c <= s.idleThreshold {
			scores[i] = 1
			continue
		}
		// c > idleThreshold >= 0, so maxCount >= c > 0.
		scores[i] = float64(maxCount-c) / float64(maxCount) * s.maxBusyScore
	}
}

// Registration registers the active-request-scorer type.
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
