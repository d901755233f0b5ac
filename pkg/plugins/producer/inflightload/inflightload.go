// Package inflightload implements the inflight-load-producer, which counts,
// per endpoint, the requests this picker has sent that have not completed,
// and their estimated tokens.
//
// It is a data producer and a request-lifecycle plugin at once:
//
//   - PreRequest charges the scheduled request to every target of the
//     primary profile: one request and its estimated tokens each.
//   - ResponseComplete releases exactly what PreRequest charged, on the same
//     endpoints, whatever endpoint the completion names. The framework calls
//     it once per request: at the end of the stream, on an error, or when
//     the client disconnects.
//   - Produce sets scheduling.InFlightLoadKey on every request to a live
//     view of the counters, for token-load-scorer, active-request-scorer and
//     other consumers.
//
// What a request is charged depends on the tokenAccounting parameter:
//
//   - "gie" (default) reproduces GIE v1.5's inflight-load-producer: each
//     target is charged scheduling.EstimateTokens(req), the input tokens plus
//     round(1.5 × input) expected output tokens, all held until the response
//     completes.
//   - "llm-d" is llm-d's variant: each target is charged its uncached
//     prompt tokens (the input tokens × (1 − the target's prefix-cache hit
//     ratio), when a prefix producer has set scheduling.PrefixMatchKey),
//     released at the first response body chunk, since prefill is over by
//     then; with addEstimatedOutputTokens, also an output estimate held until
//     completion.
//
// Two deliberate differences from GIE v1.5, both leaks there: GIE charges
// every primary target but releases only the endpoint the end of the stream
// names, so fallback targets are never released; and it releases only at
// the end of the stream, so a client disconnect or a failed stream is never
// released. Here the charged set is released, once, on completion.
//
// What a request added is remembered on the request itself (a private
// StateKey), and every release subtracts exactly that amount once, with a
// floor at zero, so counters never drift or go negative. A completion
// without a PreRequest releases nothing and leaves a marker, so that a
// PreRequest arriving after the completion (which the framework does not
// do) charges nothing either. A second PreRequest for the same request
// (re-scheduling) moves the charge to the new targets.
//
// # Concurrency
//
// Counters are atomics in a sync.Map keyed by endpoint key: the hot path
// takes no lock shared by all requests. A new endpoint costs one allocation
// the first time it is targeted. PreRequest and ResponseComplete of one
// request must not run concurrently with each other; the framework orders
// them. Concurrent ResponseComplete calls are safe.
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

// Accounting says how a request's tokens are counted.
type Accounting string

const (
	// AccountingGIE counts GIE v1.5's estimate (input + 1.5 × input
	// tokens) on each target until the response completes.
	AccountingGIE Accounting = "gie"
	// AccountingLLMD counts llm-d's uncached prompt tokens until the first
	// response chunk, plus optionally estimated output tokens until the
	// response completes.
	AccountingLLMD Accounting = "llm-d"
)

// DefaultOutputRatio is llm-d's default estimated output-to-prompt token
// ratio (tokenAccounting "llm-d").
const DefaultOutputRatio = 1.5

// pruneInterval is how often idle endpoint counters are looked for.
const pruneInterval = time.Minute

// dead marks a counter being removed by a prune; an increment that sees a
// negative request count retries on a fresh counter.
const dead = math.MinInt64 / 2

// Params is the producer's parameters.
type Params struct {
	// TokenAccounting is how a request's tokens are counted: "gie" (GIE
	// v1.5's estimate of input plus 1.5 times as many output tokens, held
	// until the response completes) or "llm-d" (llm-d's uncached prompt
	// tokens, released at the first response chunk, and optionally
	// estimated output tokens). Unset, it follows the file the plugin comes
	// from, so that both projects' files count as they do there: "llm-d"
	// for an llm-d.ai/v1alpha1 configuration or when one of the three
	// llm-d parameters below is set, "gie" otherwise. The three parameters
	// below are rejected with "gie".
	TokenAccounting Accounting `json:"tokenAccounting,omitempty"`
	// AddEstimatedOutputTokens (llm-d only) adds an estimate of each
	// request's output tokens, held until the response completes. Default
	// false.
	AddEstimatedOutputTokens *bool `json:"addEstimatedOutputTokens,omitempty"`
	// OutputRatio (llm-d only) estimates output tokens as round(prompt
	// tokens × outputRatio), bounded by the request's max_tokens and by
	// maxEstimatedOutputTokens. Used with addEstimatedOutputTokens.
	// Default 1.5; must be >= 0.
	OutputRatio *float64 `json:"outputRatio,omitempty"`
	// MaxEstimatedOutputTokens (llm-d only) caps the estimated output
	// tokens of one request. Unset (the default) means no cap; when set it
	// must be >= 0.
	MaxEstimatedOutputTokens *int64 `json:"maxEstimatedOutputTokens,omitempty"`
}

// DefaultParams returns the defaults: the accounting follows the
// configuration (see TokenAccounting).
func DefaultParams() Params {
	return Params{}
}

// llmdKeysSet reports whether any llm-d-only parameter is set.
func (p *Params) llmdKeysSet() bool {
	return p.AddEstimatedOutputTokens != nil || p.OutputRatio != nil || p.MaxEstimatedOutputTokens != nil
}

// resolve returns p with TokenAccounting decided, for a configuration of
// the given apiVersion.
func (p Params) resolve(apiVersion string) Params {
	if p.TokenAccounting == "" {
		p.TokenAccounting = AccountingGIE
		if apiVersion == scheduling.APIVersionLLMD || p.llmdKeysSet() {
			p.TokenAccounting = AccountingLLMD
		}
	}
	return p
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	switch p.TokenAccounting {
	case "":
		// Decided by New from the configuration (see TokenAccounting).
	case AccountingGIE:
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"addEstimatedOutputTokens", p.AddEstimatedOutputTokens != nil},
			{"outputRatio", p.OutputRatio != nil},
			{"maxEstimatedOutputTokens", p.MaxEstimatedOutputTokens != nil},
		} {
			if f.set {
				errs = append(errs, fmt.Errorf("%s: applies only with tokenAccounting %q (tokenAccounting is %q)", f.name, AccountingLLMD, AccountingGIE))
			}
		}
	case AccountingLLMD:
	default:
		errs = append(errs, fmt.Errorf("tokenAccounting: must be %q or %q, got %q", AccountingGIE, AccountingLLMD, p.TokenAccounting))
	}
	if r := p.OutputRatio; r != nil && (*r < 0 || math.IsNaN(*r) || math.IsInf(*r, 0)) {
		errs = append(errs, fmt.Errorf("outputRatio: must be a finite number >= 0, got %v", *r))
	}
	if m := p.MaxEstimatedOutputTokens; m != nil && *m < 0 {
		errs = append(errs, fmt.Errorf("maxEstimatedOutputTokens: must be >= 0, got %d", *m))
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

// charge is what one request added to one endpoint's counter.
type charge struct {
	c *counter
	// prompt are the tokens released at the first response chunk (llm-d's
	// uncached prompt tokens; 0 with GIE's accounting).
	prompt atomic.Int64
	// held are the tokens released when the response completes.
	held    atomic.Int64
	request atomic.Bool
}

// entry is what one request added, kept on the request so that releases
// subtract exactly that, once.
type entry struct {
	charges []charge
	one     [1]charge // backs charges for the usual single target
}

// completed marks a request whose response has completed: a PreRequest
// arriving afterwards charges nothing.
var completed = &entry{}

// Producer tracks in-flight load per endpoint. It is safe for concurrent
// use.
type Producer struct {
	params      Params // as configured, accounting resolved
	typedName   scheduling.TypedName
	llmd        bool
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
func New(name string, p Params, h scheduling.Handle) (*Producer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	apiVersion := ""
	if d, ok := h.(scheduling.ConfigDialect); ok {
		apiVersion = d.APIVersion()
	}
	p = p.resolve(apiVersion)
	if name == "" {
		name = Type
	}
	pr := &Producer{
		params:      p,
		typedName:   scheduling.TypedName{Type: Type, Name: name},
		llmd:        p.TokenAccounting == AccountingLLMD,
		outputRatio: DefaultOutputRatio,
		maxOutput:   -1,
		entryKey:    scheduling.NewStateKey[*entry](Type + "/" + name + "/added"),
		now:         time.Now,
	}
	if p.AddEstimatedOutputTokens != nil {
		pr.addOutput = *p.AddEstimatedOutputTokens
	}
	if p.OutputRatio != nil {
		pr.outputRatio = *p.OutputRatio
	}
	if p.MaxEstimatedOutputTokens != nil {
		pr.maxOutput = *p.MaxEstimatedOutputTokens
	}
	pr.nextPrune.Store(pr.now().Add(pruneInterval).UnixNano())
	return pr, nil
}

// TypedName implements scheduling.Plugin.
func (p *Producer) TypedName() scheduling.TypedName { return p.typedName }

// EffectiveParams returns the parameters with the accounting decided, for
// `epp validate -o yaml`.
func (p *Producer) EffectiveParams() any { return p.params }

// Produces implements scheduling.DataProducer.
func (p *Producer) Produces() []string { return []string{scheduling.InFlightLoadKey.Name()} }

// Consumes implements scheduling.DataProducer. The prefix match (read in
// PreRequest with llm-d's accounting, after every producer has run) is
// optional, so it is not declared: declaring it would make a prefix
// producer mandatory.
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

// PreRequest implements scheduling.PreRequest: it charges the request to
// every target of the primary profile. A request charged before is moved
// to the new targets; a request already completed is not charged.
func (p *Producer) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
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
	old, had := p.entryKey.Get(req)
	if old == completed {
		return
	}
	e := &entry{}
	e.charges = e.one[:]
	if n > 1 {
		e.charges = make([]charge, n)
	}
	var in, held int64
	if p.llmd {
		in = scheduling.EstimateInputTokens(req)
		held = p.estimateOutput(req, in)
	} else {
		held = scheduling.EstimateTokens(req)
	}
	i := 0
	for _, t := range targets {
		if t == nil {
			continue
		}
		ch := &e.charges[i]
		i++
		var prompt int64
		if p.llmd {
			prompt = uncached(req, t, in)
		}
		ch.c = p.acquire(t.Key(), prompt+held)
		ch.prompt.Store(prompt)
		ch.held.Store(held)
		ch.request.Store(true)
	}
	p.entryKey.Set(req, e)
	if had {
		releaseAll(old)
	}
}

// ResponseStreaming implements scheduling.ResponseStreaming: with llm-d's
// accounting the first response body chunk releases the request's prompt
// tokens. With GIE's it does nothing.
func (p *Producer) ResponseStreaming(_ context.Context, req *scheduling.Request, _ *scheduling.Response, _ []byte, _ *scheduling.Endpoint) {
	if !p.llmd || req == nil {
		return
	}
	if e, ok := p.entryKey.Get(req); ok {
		for i := range e.charges {
			ch := &e.charges[i]
			release(&ch.prompt, &ch.c.tokens)
		}
	}
}

// ResponseComplete implements scheduling.ResponseComplete: it releases all
// the request still holds, on the endpoints it was charged to. The target
// argument is not used.
func (p *Producer) ResponseComplete(_ context.Context, req *scheduling.Request, _ *scheduling.Response, _ *scheduling.Endpoint) {
	if req == nil {
		return
	}
	e, ok := p.entryKey.Get(req)
	p.entryKey.Set(req, completed)
	if ok {
		releaseAll(e)
	}
}

// Forget drops an endpoint's counters at once, e.g. when the endpoint is
// deleted.
func (p *Producer) Forget(endpointKey string) {
	p.counters.Delete(endpointKey)
}

// uncached returns llm-d's uncached prompt tokens of a request on target:
// in × (1 − the target's prefix hit ratio), rounded.
func uncached(req *scheduling.Request, target *scheduling.Endpoint, in int64) int64 {
	ratio := 0.0
	if pm, ok := scheduling.PrefixMatchKey.Get(req); ok && pm != nil {
		ratio = min(max(pm.Ratio(target), 0), 1)
	}
	return int64(math.Round(float64(in) * (1 - ratio)))
}

// estimateOutput returns llm-d's estimated output tokens of a request with
// in input tokens, or 0 without addEstimatedOutputTokens. Output is
// estimated from the whole prompt: caching shortens prefill, not the
// answer.
func (p *Producer) estimateOutput(req *scheduling.Request, in int64) int64 {
	if !p.addOutput {
		return 0
	}
	out := int64(math.Round(float64(in) * p.outputRatio))
	if req.MaxOutputTokens > 0 {
		out = min(out, int64(req.MaxOutputTokens))
	}
	if p.maxOutput >= 0 {
		out = min(out, p.maxOutput)
	}
	return out
}

// releaseAll releases everything an entry still holds, once. Tokens go
// before the request count: a counter whose request count is zero holds no
// request and may be pruned.
func releaseAll(e *entry) {
	for i := range e.charges {
		ch := &e.charges[i]
		release(&ch.prompt, &ch.c.tokens)
		release(&ch.held, &ch.c.tokens)
		if ch.request.Swap(false) {
			decrementClamped(&ch.c.requests, 1)
		}
	}
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
