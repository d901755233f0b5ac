// Package concurrency provides the concurrency-detector plugin: a
// saturation detector and scheduling filter driven by the requests (or
// estimated tokens) the gateway itself has in flight to each endpoint.
//
// Unlike utilization-detector it does not wait for scraped metrics: the
// detector charges a request to every target of the primary profile in its
// PreRequest hook and releases the same endpoints exactly once in its
// ResponseComplete hook (end of stream, error or client disconnect). Pool
// saturation is the total in flight divided by the pool's capacity
// (endpoints × per-endpoint capacity); as a filter it keeps endpoints below
// capacity×(1+headroom).
//
// This follows GIE v1.5's concurrency-detector (parameters, formulas, and a
// filter that may remove every endpoint). Its counts are those of GIE's
// inflight-load-producer, which GIE's detector reads: the same targets are
// charged and tokens are estimated by the same formula,
// scheduling.EstimateTokens, which the inflight-load-producer also uses.
package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type name used in configuration.
const Type = "concurrency-detector"

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
	// ConcurrencyMode is what is counted: "requests" (each request counts
	// 1) or "tokens" (each request counts its estimated prompt tokens plus
	// 1.5 times as many output tokens, scheduling.EstimateTokens). Default
	// "requests".
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

// Detector is a concurrency-detector instance. It is safe for concurrent
// use; its counters live as long as the instance.
type Detector struct {
	name     string
	tokens   bool  // count tokens instead of requests
	capacity int64 // per endpoint, in requests or tokens
	limit    int64 // filter limit: capacity × (1 + headroom)

	// loads maps an endpoint key to its *load. An entry is removed when
	// its counters return to zero, so endpoints that leave the pool do not
	// accumulate.
	loads sync.Map
	// chargeKey holds, on each request this instance counted, what it
	// counted, so the release happens once and on the same endpoints.
	chargeKey scheduling.StateKey[*charge]
}

// load is one endpoint's in-flight counters. Reads are lock-free; changes
// take mu so that an entry is never removed while being incremented.
type load struct {
	requests atomic.Int64
	tokens   atomic.Int64
	mu       sync.Mutex
	removed  bool
}

// charge is what one request added to its targets' loads.
type charge struct {
	tokens   int64 // per target
	targets  []charged
	one      [1]charged // backs targets for the usual single target
	released atomic.Bool
}

// charged is one endpoint a request was charged to.
type charged struct {
	key  string
	load *load
}

// completed marks a request whose response has completed: a PreRequest
// arriving afterwards charges nothing.
var completed = func() *charge {
	c := &charge{}
	c.released.Store(true)
	return c
}()

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
		name:      name,
		tokens:    p.ConcurrencyMode == ModeTokens,
		capacity:  p.MaxConcurrency,
		chargeKey: scheduling.NewStateKey[*charge](Type + "/" + name + "/charge"),
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

// InFlight returns the requests this detector counted against the endpoint
// that have not completed, and their estimated tokens
// (scheduling.EstimateTokens each).
func (d *Detector) InFlight(endpointKey string) (requests, tokens int64) {
	v, ok := d.loads.Load(endpointKey)
	if !ok {
		return 0, 0
	}
	l := v.(*load)
	return l.requests.Load(), l.tokens.Load()
}

// inFlight returns the counted quantity (requests or tokens) of an
// endpoint.
func (d *Detector) inFlight(e *scheduling.Endpoint) int64 {
	v, ok := d.loads.Load(e.Key())
	if !ok {
		return 0
	}
	if d.tokens {
		return v.(*load).tokens.Load()
	}
	return v.(*load).requests.Load()
}

// Saturation implements scheduling.SaturationDetector: total in flight over
// the candidates divided by len(candidates) × capacity; 1.0 for an empty
// candidate list (fail closed: nothing to send to).
func (d *Detector) Saturation(_ context.Context, candidates []*scheduling.Endpoint) float64 {
	if len(candidates) == 0 {
		return 1
	}
	var total int64
	for _, e := range candidates {
		total += d.inFlight(e)
	}
	return float64(total) / (float64(len(candidates)) * float64(d.capacity))
}

// Filter implements scheduling.Filter: it keeps the endpoints whose
// in-flight count is below capacity × (1 + headroom). As in GIE it may keep
// none, which fails the profile run; it is a hard per-endpoint limit. When
// every endpoint passes it returns the input slice without allocating.
func (d *Detector) Filter(_ context.Context, _ *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	var kept []*scheduling.Endpoint
	for i, e := range endpoints {
		if d.inFlight(e) < d.limit {
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

// PreRequest implements scheduling.PreRequest: it charges the request (and
// its estimated tokens) to every target of the primary profile, as GIE's
// inflight-load-producer does. A request charged before is moved to the new
// targets, so counts stay exact; a request already completed is not
// charged.
func (d *Detector) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
	if req == nil {
		return
	}
	targets := result.Targets()
	n := 0
	for _, t := range targets {
		if t != nil {
			n++
		}
	}
	if n == 0 {
		return
	}
	old, _ := d.chargeKey.Get(req)
	if old == completed {
		return
	}
	c := &charge{tokens: scheduling.EstimateTokens(req)}
	c.targets = c.one[:0]
	if n > 1 {
		c.targets = make([]charged, 0, n)
	}
	for _, t := range targets {
		if t != nil {
			c.targets = append(c.targets, charged{key: t.Key(), load: d.acquire(t.Key(), c.tokens)})
		}
	}
	d.chargeKey.Set(req, c)
	if old != nil {
		d.release(old)
	}
}

// ResponseComplete implements scheduling.ResponseComplete: it releases what
// PreRequest charged for the request, once, on the same endpoints,
// whatever the outcome and whatever endpoint the completion names.
func (d *Detector) ResponseComplete(_ context.Context, req *scheduling.Request, _ *scheduling.Response, _ *scheduling.Endpoint) {
	if req == nil {
		return
	}
	c, ok := d.chargeKey.Get(req)
	d.chargeKey.Set(req, completed)
	if ok {
		d.release(c)
	}
}

// acquire adds one request and tokens to the endpoint's load and returns
// it. If the entry it finds is being removed it retries with a new one.
func (d *Detector) acquire(key string, tokens int64) *load {
	for {
		v, ok := d.loads.Load(key)
		if !ok {
			v, _ = d.loads.LoadOrStore(key, &load{})
		}
		l := v.(*load)
		l.mu.Lock()
		if l.removed {
			l.mu.Unlock()
			continue
		}
		l.requests.Add(1)
		l.tokens.Add(tokens)
		l.mu.Unlock()
		return l
	}
}

// release undoes a charge, if not yet undone.
func (d *Detector) release(c *charge) {
	if c == nil || !c.released.CompareAndSwap(false, true) {
		return
	}
	for _, t := range c.targets {
		l := t.load
		l.mu.Lock()
		reqs := l.requests.Add(-1)
		toks := l.tokens.Add(-c.tokens)
		if reqs <= 0 && toks <= 0 {
			l.removed = true
			d.loads.CompareAndDelete(t.key, l)
		}
		l.mu.Unlock()
	}
}

// Registration registers the concurrency-detector type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.SaturationDetector = (*Detector)(nil)
	_ scheduling.Filter             = (*Detector)(nil)
	_ scheduling.PreRequest         = (*Detector)(nil)
	_ scheduling.ResponseComplete   = (*Detector)(nil)
)
