// Package concurrency provides the concurrency-detector plugin: a
// saturation detector and scheduling filter driven by the requests (or
// estimated tokens) the gateway itself has in flight to each endpoint.
//
// Unlike utilization-detector it does not wait for scraped metrics: it
// reads the in-flight counts of the inflight-load-producer, which the
// producer puts on every request under scheduling.InFlightLoadKey. The
// detector keeps no counters of its own. It declares the key in Consumes and
// names the producer as its DefaultProducer, so the configuration loader
// adds an inflight-load-producer with default parameters when none is
// configured. Pool saturation is the total in flight divided by the pool's
// capacity (endpoints × per-endpoint capacity); as a filter it keeps
// endpoints below capacity×(1+headroom).
//
// # The pool view
//
// The flow-control dispatcher asks for the pool's saturation without a
// request (scheduling.PoolSaturationDetector): PoolSaturation reads the
// producer's request-free view (scheduling.EndpointInFlightLoad, handed to
// the detector by the host through UseInFlightLoad) and, before the host
// has handed one, the host's own accounting on each endpoint
// (scheduling.LoadKey), which is what the producer reads with its default
// accounting. No producer runs and nothing is recorded. Bound to the
// producer (the server binds the configuration's whenever one serves, and
// the loader always adds one) the value equals Saturation's for a request
// that producer prepared. Unbound it is not Saturation's without a
// producer (0: no in-flight view, every endpoint idle): it reads the
// host's counts instead, so a dispatcher asking before the bind does not
// see an idle pool and release the whole queue.
//
// This follows GIE v1.5's concurrency-detector (parameters, formulas, and a
// filter that may remove every endpoint), which also reads the counts of
// GIE's inflight-load-producer.
package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type name used in configuration.
const Type = "concurrency-detector"

// ProducerType is the data producer whose counts the detector reads; the
// configuration loader adds one when none is configured.
const ProducerType = "inflight-load-producer"

// Mode says what the detector counts.
type Mode string

const (
	// ModeRequests counts in-flight requests against maxConcurrency.
	ModeRequests Mode = "requests"
	// ModeTokens counts estimated in-flight tokens against
	// maxTokenConcurrency.
	ModeTokens Mode = "tokens"
)

// Params configures a concurrency-detector.
type Params struct {
	// ConcurrencyMode is what is counted: "requests" (the producer's
	// in-flight requests) or "tokens" (the producer's in-flight tokens;
	// with its default GIE accounting each request counts its estimated
	// prompt tokens plus 1.5 times as many output tokens,
	// scheduling.EstimateTokens). Default "requests".
	ConcurrencyMode Mode `json:"concurrencyMode"`
	// MaxConcurrency is one endpoint's ideal number of in-flight requests
	// in "requests" mode. Default 100; must be > 0.
	MaxConcurrency int64 `json:"maxConcurrency"`
	// MaxTokenConcurrency is one endpoint's ideal number of in-flight
	// tokens in "tokens" mode. Default 1000000; must be > 0.
	MaxTokenConcurrency int64 `json:"maxTokenConcurrency"`
	// Headroom is the burst allowance of the filter above the capacity, as
	// a fraction: with 0.2 an endpoint is filtered out at 120% of its
	// capacity. It does not change the saturation value. Default 0; must
	// be >= 0.
	Headroom float64 `json:"headroom"`
}

// DefaultParams returns the defaults of GIE v1.5.
func DefaultParams() Params {
	return Params{
		ConcurrencyMode:     ModeRequests,
		MaxConcurrency:      100,
		MaxTokenConcurrency: 1_000_000,
		Headroom:            0,
	}
}

// Validate reports every invalid field.
func (p *Params) Validate() error {
	var errs []error
	switch p.ConcurrencyMode {
	case ModeRequests, ModeTokens:
	default:
		errs = append(errs, fmt.Errorf("concurrencyMode: must be %q or %q, got %q", ModeRequests, ModeTokens, p.ConcurrencyMode))
	}
	if p.MaxConcurrency <= 0 {
		errs = append(errs, fmt.Errorf("maxConcurrency: must be > 0, got %d", p.MaxConcurrency))
	}
	if p.MaxTokenConcurrency <= 0 {
		errs = append(errs, fmt.Errorf("maxTokenConcurrency: must be > 0, got %d", p.MaxTokenConcurrency))
	}
	if !(p.Headroom >= 0) {
		errs = append(errs, fmt.Errorf("headroom: must be >= 0, got %v", p.Headroom))
	}
	return errors.Join(errs...)
}

// Detector is a concurrency-detector instance. It holds no counters: it
// reads the in-flight load on the request (or, for the pool view, the
// producer it was given), so it is safe for concurrent use and takes no
// lock.
type Detector struct {
	name     string
	tokens   bool  // count tokens instead of requests
	capacity int64 // per endpoint, in requests or tokens
	limit    int64 // filter limit: capacity × (1 + headroom)

	// pool is the producer's request-free view (UseInFlightLoad); nil
	// until the host gives one.
	pool atomic.Pointer[poolLoad]
}

type poolLoad struct {
	load scheduling.EndpointInFlightLoad
}

// New builds a detector from validated parameters.
func New(name string, p Params, h scheduling.Handle) (*Detector, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Headroom > 1 && h != nil {
		h.Logger().Info("headroom above 1 allows more than twice the capacity; check it is a fraction, not a percentage",
			"plugin", name, "headroom", p.Headroom)
	}
	d := &Detector{
		name:     name,
		tokens:   p.ConcurrencyMode == ModeTokens,
		capacity: p.MaxConcurrency,
	}
	if d.tokens {
		d.capacity = p.MaxTokenConcurrency
	}
	// Same arithmetic as GIE (truncation towards zero).
	d.limit = int64(float64(d.capacity) * (1 + p.Headroom))
	return d, nil
}

// TypedName implements scheduling.Plugin.
func (d *Detector) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: d.name}
}

// Consumes implements scheduling.DataConsumer.
func (d *Detector) Consumes() []string { return []string{scheduling.InFlightLoadKey.Name()} }

// DefaultProducer implements scheduling.DefaultProducer: the in-flight load
// comes from an inflight-load-producer with default parameters.
func (d *Detector) DefaultProducer(key string) (pluginType string, params []byte, ok bool) {
	if key == scheduling.InFlightLoadKey.Name() {
		return ProducerType, nil, true
	}
	return "", nil, false
}

// view returns the request's in-flight load, nil when the request is nil
// or carries none.
func view(req *scheduling.Request) scheduling.InFlightLoad {
	if req == nil {
		return nil
	}
	load, _ := scheduling.InFlightLoadKey.Get(req)
	return load
}

// inFlight returns the counted quantity (requests or tokens) of an
// endpoint in load, which must not be nil.
func (d *Detector) inFlight(load scheduling.InFlightLoad, e *scheduling.Endpoint) int64 {
	requests, tokens := load.InFlight(e.Key())
	if d.tokens {
		return tokens
	}
	return requests
}

// Saturation implements scheduling.SaturationDetector: total in flight over
// the candidates divided by len(candidates) × capacity; 1.0 for an empty
// candidate list (fail closed: nothing to send to). The counts are read
// from the request's scheduling.InFlightLoadKey; without one (nil request,
// key unset) every endpoint counts as idle and the value is 0.
func (d *Detector) Saturation(_ context.Context, req *scheduling.Request, candidates []*scheduling.Endpoint) float64 {
	if len(candidates) == 0 {
		return 1
	}
	load := view(req)
	if load == nil {
		return 0
	}
	var total int64
	for _, e := range candidates {
		total += d.inFlight(load, e)
	}
	return float64(total) / (float64(len(candidates)) * float64(d.capacity))
}

// UseInFlightLoad implements scheduling.InFlightLoadUser: PoolSaturation
// reads load from now on (nil: the endpoints' own accounting).
func (d *Detector) UseInFlightLoad(load scheduling.EndpointInFlightLoad) {
	if load == nil {
		d.pool.Store(nil)
		return
	}
	d.pool.Store(&poolLoad{load: load})
}

// PoolSaturation implements scheduling.PoolSaturationDetector: Saturation
// without a request, from the producer given by UseInFlightLoad or, before
// one is given, from each endpoint's host accounting (scheduling.LoadKey;
// an endpoint without one counts as idle), where Saturation without an
// in-flight view gives 0 (see "The pool view"). 1.0 for an empty
// candidate list.
func (d *Detector) PoolSaturation(candidates []*scheduling.Endpoint) float64 {
	if len(candidates) == 0 {
		return 1
	}
	var load scheduling.EndpointInFlightLoad
	if p := d.pool.Load(); p != nil {
		load = p.load
	}
	var total int64
	for _, e := range candidates {
		var requests, tokens int64
		if load != nil {
			requests, tokens = load.EndpointInFlight(e)
		} else if l, ok := scheduling.LoadKey.Get(e); ok && l != nil {
			requests, tokens = max(l.InFlight(), 0), max(l.InFlightTokens(), 0)
		}
		if d.tokens {
			total += tokens
		} else {
			total += requests
		}
	}
	return float64(total) / (float64(len(candidates)) * float64(d.capacity))
}

// Filter implements scheduling.Filter: it keeps the endpoints whose
// in-flight count is below capacity × (1 + headroom). As in GIE it may keep
// none, which fails the profile run; it is a hard per-endpoint limit. When
// every endpoint passes it returns the input slice without allocating.
// Without an in-flight view on the request every endpoint counts as idle
// and all are kept.
func (d *Detector) Filter(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	load := view(req)
	if load == nil {
		return endpoints
	}
	var kept []*scheduling.Endpoint
	for i, e := range endpoints {
		if d.inFlight(load, e) < d.limit {
			if kept != nil {
				kept = append(kept, e)
			}
			continue
		}
		if kept == nil {
			kept = make([]*scheduling.Endpoint, i, len(endpoints))
			copy(kept, endpoints[:i])
		}
	}
	if kept == nil {
		return endpoints
	}
	return kept
}

// Registration registers the concurrency-detector type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.SaturationDetector     = (*Detector)(nil)
	_ scheduling.PoolSaturationDetector = (*Detector)(nil)
	_ scheduling.InFlightLoadUser       = (*Detector)(nil)
	_ scheduling.Filter                 = (*Detector)(nil)
	_ scheduling.DataConsumer           = (*Detector)(nil)
	_ scheduling.DefaultProducer        = (*Detector)(nil)
)
