// Package inflightload implements the inflight-load-producer, which counts,
// per endpoint, the requests this picker has sent and that have not
// completed, and their estimated uncached prompt tokens.
//
// It is a data producer and a request-lifecycle plugin at once:
//
//   - PreRequest adds the scheduled request to its primary target: one
//     request, plus the prompt tokens the target still has to compute
//     (Request.PromptTokens discounted by the target's prefix-cache hit,
//     tokens × (1 − ratio), when a prefix producer has set
//     scheduling.PrefixMatchKey), plus, with addEstimatedOutputTokens, an
//     estimate of the output tokens.
//   - ResponseStreaming releases the prompt tokens at the first response
//     body chunk: prefill is over by then (llm-d's default behaviour).
//   - ResponseComplete releases whatever the request still holds (output
//     tokens, prompt tokens of a response that had no body, and the request
//     count). The framework calls it exactly once per request, also when the
//     client disconnects.
//   - Produce sets scheduling.InFlightLoadKey on every request to a live
//     view of the counters, for token-load-scorer, active-request-scorer and
//     other consumers.
//
// What a request added is remembered on the request itself (a private
// StateKey), and every release subtracts exactly that amount once, with a
// floor at zero, so counters never drift or go negative.
//
// # Concurrency
//
// Counters are atomics in a sync.Map keyed by endpoint key: the hot path
// takes no lock shared by all requests. A new endpoint costs one allocation
// the first time it is targeted.
//
// # Forgetting endpoints
//
// An endpoint's counters are dropped once they are back at zero, the
// endpoint has not been targeted for a whole prune interval (one minute)
// and it is absent from the candidates of the request that runs the prune.
// The prune runs lazily, at most once per interval, inside Produce; no
// goroutine is started. Dropping a zero counter loses nothing: an unknown
// endpoint reads as zero and its counter is recreated when it is targeted
// again. Forget drops an endpoint at once (for a data layer that learns of
// deletions); requests still in flight to it then release into the dropped
// counter and never touch a new one.
package inflightload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "inflight-load-producer"

// DefaultOutputRatio is llm-d's default estimated output-to-prompt token
// ratio.
const DefaultOutputRatio = 1.5

// pruneInterval is how often idle endpoint counters are looked for.
const pruneInterval = time.Minute

// dead marks a counter being removed by a prune; an increment that sees a
// negative request count retries on a fresh counter.
const dead = math.MinInt64 / 2

// Params is the producer's parameters.
type Params struct {
	// AddEstimatedOutputTokens adds an estimate of each request's output
	// tokens to its endpoint's in-flight tokens, released when the response
	// completes (prompt tokens are still released at the first response
	// chunk). Default false: only uncached prompt tokens are counted.
	AddEstimatedOutputTokens bool `json:"addEstimatedOutputTokens"`
	// OutputRatio estimates output tokens as round(promptTokens ×
	// outputRatio), bounded by the request's max_tokens and by
	// maxEstimatedOutputTokens. Used only with addEstimatedOutputTokens.
	// Default 1.5; must be >= 0.
	OutputRatio float64 `json:"outputRatio"`
	// MaxEstimatedOutputTokens caps the estimated output tokens of one
	// request. Unset (the default) means no cap; when set it must be >= 0.
	MaxEstimatedOutputTokens *int64 `json:"maxEstimatedOutputTokens,omitempty"`
}

// DefaultParams returns llm-d's defaults.
func DefaultParams() Params {
	return Params{OutputRatio: DefaultOutputRatio}
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	if p.OutputRatio < 0 || math.IsNaN(p.OutputRatio) || math.IsInf(p.OutputRatio, 0) {
		errs = append(errs, fmt.Errorf("outputRatio: must be a finite number >= 0, got %v", p.OutputRatio))
	}
	if p.MaxEstimatedOutputTokens != nil && *p.MaxEstimatedOutputTokens < 0 {
		errs = append(errs, fmt.Errorf("maxEstimatedOutputTokens: must be >= 0, got %d", *p.MaxEstimatedOutputTokens))
	}
	return errors.Join(errs...)
}

// counter is one endpoint's in-flight load.
type counter struct {
	requests atomic.Int64
	tokens   atomic.Int64
	// lastUse is the prune generation in which the endpoint was last
	// targeted.
	lastUse atomic.Int64
}

// entry is what one request added, kept on the request so that releases
// subtract exactly that, once.
type entry struct {
	c       *counter
	prompt  atomic.Int64
	output  atomic.Int64
	request atomic.Bool
}

// Producer tracks in-flight load per endpoint. It is safe for concurrent
// use.
type Producer struct {
	typedName   scheduling.TypedName
	addOutput   bool
	outputRatio float64
	maxOutput   int64 // < 0: no cap
	entryKey    scheduling.StateKey[*entry]

	counters   sync.Map // endpoint key (string) -> *counter
	now        func() time.Time
	nextPrune  atomic.Int64 // unix nanoseconds
	generation atomic.Int64
}

// New returns an in-flight load producer named name.
func New(name string, p Params, _ scheduling.Handle) (*Producer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	maxOutput := int64(-1)
	if p.MaxEstimatedOutputTokens != nil {
		maxOutput = *p.MaxEstimatedOutputTokens
	}
	pr := &Producer{
		typedName:   scheduling.TypedName{Type: Type, Name: name},
		addOutput:   p.AddEstimatedOutputTokens,
		outputRatio: p.OutputRatio,
		maxOutput:   maxOutput,
		entryKey:    scheduling.NewStateKey[*entry](Type + "/" + name + "/added"),
		now:         time.Now,
	}
	pr.nextPrune.Store(pr.now().Add(pruneInterval).UnixNano())
	return pr, nil
}

// TypedName implements scheduling.Plugin.
func (p *Producer) TypedName() scheduling.TypedName { return p.typedName }

// Produces implements scheduling.DataProducer.
func (p *Producer) Produces() []string { return []string{scheduling.InFlightLoadKey.Name()} }

// Consumes implements scheduling.DataProducer. The prefix match is read in
// PreRequest, after every producer has run, and is optional, so it is not
// declared: declaring it would make a prefix producer mandatory.
func (p *Producer) Consumes() []string { return nil }

// Produce implements scheduling.DataProducer: it sets InFlightLoadKey to
// the producer's live view and, at most once per prune interval, drops
// idle counters.
func (p *Producer) Produce(_ context.Context, req *scheduling.Request, candidates []*scheduling.Endpoint) {
	p.maybePrune(candidates)
	if req != nil {
		scheduling.InFlightLoadKey.Set(req, p)
	}
}

// InFlight implements scheduling.InFlightLoad: the requests sent to the
// endpoint that have not completed, and their tokens still counted.
func (p *Producer) InFlight(endpointKey string) (requests, tokens int64) {
	v, ok := p.counters.Load(endpointKey)
	if !ok {
		return 0, 0
	}
	c := v.(*counter)
	requests = c.requests.Load()
	if requests < 0 {
		return 0, 0
	}
	return requests, max(c.tokens.Load(), 0)
}

// PreRequest implements scheduling.PreRequest: it counts the request on its
// primary target.
func (p *Producer) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
	targets := result.Targets()
	if req == nil || len(targets) == 0 || targets[0] == nil {
		return
	}
	if _, counted := p.entryKey.Get(req); counted {
		return
	}
	target := targets[0]
	prompt, output := p.estimate(req, target)
	e := &entry{c: p.acquire(target.Key(), prompt+output)}
	e.prompt.Store(prompt)
	e.output.Store(output)
	e.request.Store(true)
	p.entryKey.Set(req, e)
}

// ResponseStreaming implements scheduling.ResponseStreaming: the first
// response body chunk releases the request's prompt tokens.
func (p *Producer) ResponseStreaming(_ context.Context, req *scheduling.Request, _ *scheduling.Response, _ []byte, _ *scheduling.Endpoint) {
	if req == nil {
		return
	}
	if e, ok := p.entryKey.Get(req); ok {
		release(&e.prompt, &e.c.tokens)
	}
}

// ResponseComplete implements scheduling.ResponseComplete: it releases all
// the request still holds. The target argument is not used: the release
// goes to the counter the request was added to.
func (p *Producer) ResponseComplete(_ context.Context, req *scheduling.Request, _ *scheduling.Response, _ *scheduling.Endpoint) {
	if req == nil {
		return
	}
	e, ok := p.entryKey.Get(req)
	if !ok {
		return
	}
	// Tokens before the request count: a counter whose request count is
	// zero holds no request and may be pruned.
	release(&e.prompt, &e.c.tokens)
	release(&e.output, &e.c.tokens)
	if e.request.Swap(false) {
		decrementClamped(&e.c.requests, 1)
	}
	p.entryKey.Delete(req)
}

// Forget drops an endpoint's counters at once, e.g. when the endpoint is
// deleted.
func (p *Producer) Forget(endpointKey string) {
	p.counters.Delete(endpointKey)
}

// estimate returns the uncached prompt tokens and the estimated output
// tokens of req on target.
func (p *Producer) estimate(req *scheduling.Request, target *scheduling.Endpoint) (prompt, output int64) {
	in := int64(max(req.PromptTokens, 0))
	if in == 0 {
		return 0, 0
	}
	ratio := 0.0
	if pm, ok := scheduling.PrefixMatchKey.Get(req); ok && pm != nil {
		ratio = min(max(pm.Ratio(target), 0), 1)
	}
	prompt = int64(math.Round(float64(in) * (1 - ratio)))
	if p.addOutput {
		// Output is estimated from the whole prompt: caching shortens
		// prefill, not the answer.
		output = int64(math.Round(float64(in) * p.outputRatio))
		if req.MaxOutputTokens > 0 {
			output = min(output, int64(req.MaxOutputTokens))
		}
		if p.maxOutput >= 0 {
			output = min(output, p.maxOutput)
		}
	}
	return prompt, output
}

// acquire adds one request and tokens to the endpoint's counter, creating
// it if needed, and returns the counter it added to.
func (p *Producer) acquire(key string, tokens int64) *counter {
	for {
		v, ok := p.counters.Load(key)
		if !ok {
			v, _ = p.counters.LoadOrStore(key, new(counter))
		}
		c := v.(*counter)
		if c.requests.Add(1) <= 0 {
			// A prune is removing this counter; help it and retry.
			p.counters.CompareAndDelete(key, c)
			continue
		}
		if cur, _ := p.counters.Load(key); cur != any(c) {
			// Forgotten meanwhile: undo and retry on the live counter.
			decrementClamped(&c.requests, 1)
			continue
		}
		c.tokens.Add(tokens)
		c.lastUse.Store(p.generation.Load())
		return c
	}
}

// maybePrune runs prune if the prune interval has passed.
func (p *Producer) maybePrune(candidates []*scheduling.Endpoint) {
	now := p.now().UnixNano()
	next := p.nextPrune.Load()
	if now < next || !p.nextPrune.CompareAndSwap(next, now+int64(pruneInterval)) {
		return
	}
	p.prune(candidates)
}

// prune drops the counters that hold no request, were not targeted during
// the last prune interval and are not among candidates.
func (p *Producer) prune(candidates []*scheduling.Endpoint) {
	gen := p.generation.Add(1)
	keep := make(map[string]struct{}, len(candidates))
	for _, e := range candidates {
		if e != nil {
			keep[e.Key()] = struct{}{}
		}
	}
	p.counters.Range(func(k, v any) bool {
		c := v.(*counter)
		if _, ok := keep[k.(string)]; ok || gen-c.lastUse.Load() < 2 {
			return true
		}
		if c.requests.CompareAndSwap(0, dead) {
			p.counters.CompareAndDelete(k, c)
		}
		return true
	})
}

// release moves what held still holds out of total, once.
func release(held, total *atomic.Int64) {
	if n := held.Swap(0); n > 0 {
		decrementClamped(total, n)
	}
}

// decrementClamped subtracts delta from v without going below zero.
func decrementClamped(v *atomic.Int64, delta int64) {
	for {
		cur := v.Load()
		if cur <= 0 {
			return
		}
		if v.CompareAndSwap(cur, max(cur-delta, 0)) {
			return
		}
	}
}

// Registration registers the inflight-load-producer type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.DataProducer      = (*Producer)(nil)
	_ scheduling.InFlightLoad      = (*Producer)(nil)
	_ scheduling.PreRequest        = (*Producer)(nil)
	_ scheduling.ResponseStreaming = (*Producer)(nil)
	_ scheduling.ResponseComplete  = (*Producer)(nil)
)
