// Package inflightload implements the inflight-load-producer: a view, per
// endpoint, of the requests this picker has sent that have not completed,
// and their estimated tokens, under GIE's and llm-d's per-request key
// (scheduling.InFlightLoadKey) for token-load-scorer,
// active-request-scorer, concurrency-detector and other consumers.
//
// # One source of truth
//
// The host counts every forwarded request on the endpoint that serves it
// (pkg/datastore's EndpointStats, published as scheduling.LoadKey: the
// ext_proc server starts the count when it forwards the request, moves it
// when the gateway falls back to another endpoint of the list, and ends
// it when the response completes or the client goes away). The producer
// reads that count instead of keeping its own, so the two can never
// diverge:
//
//   - requests in flight on an endpoint with a LoadKey are
//     EndpointLoad.InFlight;
//   - with tokenAccounting "gie" (default), tokens in flight are
//     EndpointLoad.InFlightTokens: the host charges each request
//     scheduling.EstimateTokens(req), GIE v1.5's estimate (input tokens
//     plus round(1.5 × input) expected output tokens), until it completes;
//   - with "llm-d", tokens are llm-d's own quantity, which the host does
//     not count: the primary target is charged its uncached prompt tokens
//     (the input tokens × (1 − the target's prefix-cache hit ratio), when
//     a prefix producer has set scheduling.PrefixMatchKey), released at the
//     first response body chunk, and with addEstimatedOutputTokens an
//     output estimate held until completion. The producer keeps these
//     tokens itself and, like the host, moves them to the endpoint that
//     served when the gateway fell back (ResponseReceived and
//     ResponseStreaming see the served endpoint), so requests and tokens
//     always describe the same endpoint.
//
// Produce resolves endpoint keys to their LoadKey values once per
// published candidate set (an index keyed by the candidate slice, checked
// again when a new snapshot brings a new slice) and sets InFlightLoadKey
// to the producer itself; InFlight is then a map read and two atomic
// loads.
//
// Endpoints without a LoadKey (a host that does no accounting, such as a
// test) are counted by the producer itself, with the same rules: the
// primary target is charged one request and its tokens in PreRequest,
// moved when another endpoint serves, released once on completion.
//
// # Differences from GIE v1.5
//
// GIE charges every target of the primary profile (the endpoint and its
// fallbacks) but, at the end of the stream, releases only the endpoint
// that served, so fallback targets are never released; and it releases
// only at the end of the stream, so a client disconnect or a failed
// stream is never released. Here a request is counted once, on the
// endpoint serving it, and released on completion whatever the outcome.
// While a single-target request is in flight the counts are GIE's.
//
// # Concurrency
//
// Own counters are atomics in a sync.Map keyed by endpoint key; the index
// of host counts is an immutable map behind an atomic pointer: the hot
// path takes no lock shared by all requests. PreRequest, the response
// hooks and ResponseComplete of one request must not run concurrently
// with each other, except that concurrent ResponseComplete calls are
// safe; the framework orders them.
//
// # Forgetting endpoints
//
// Own counters are dropped once they are back at zero, the endpoint has
// not been targeted for a whole prune interval (one minute) and it is
// absent from the candidates of the request that runs the prune; the
// prune runs lazily, at most once per interval, inside Produce (no
// goroutine), and also drops the index of host counts, which the next
// request rebuilds. Forget drops an endpoint's counter and the index at
// once: the host calls it when an endpoint leaves or changes identity
// (pkg/server does on the store's OnRemoved), so a name reused by a new
// endpoint reads the new endpoint's count.
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

// dead marks a counter being removed by a prune; an acquire that sees a
// negative holder count retries on a fresh counter.
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

// counter is one endpoint's load counted by the producer itself: requests
// and tokens of endpoints without host accounting, llm-d's tokens of
// endpoints with it.
type counter struct {
	requests atomic.Int64
	tokens   atomic.Int64
	// holders counts the charges on the counter (with or without a
	// request); a prune removes only a counter without holders, marking it
	// dead (negative).
	holders atomic.Int64
	// lastUse is the prune generation in which the endpoint was last
	// targeted.
	lastUse atomic.Int64
}

// charge is what one request added to one endpoint's counter.
type charge struct {
	c   *counter
	key string // the endpoint charged
	// prompt are the tokens released at the first response chunk (llm-d's
	// uncached prompt tokens; 0 with GIE's accounting).
	prompt atomic.Int64
	// held are the tokens released when the response completes.
	held atomic.Int64
	// request is true while the charge counts the request itself (an
	// endpoint without host accounting).
	request atomic.Bool
	// holding is true until the charge is released: it holds the counter.
	holding atomic.Bool
}

// entry is what one request added, kept on the request so that releases
// subtract exactly that, once.
type entry struct {
	ch charge
	// none: nothing was charged (the host counts all of it).
	none bool
}

// Sentinels kept on requests.
var (
	// completed marks a request whose response has completed: a PreRequest
	// arriving afterwards charges nothing.
	completed = &entry{none: true}
	// hosted marks a request the host counts entirely (GIE's accounting
	// on an endpoint with a LoadKey): nothing to release.
	hosted = &entry{none: true}
)

// loadIndex maps endpoint keys to the host's accounting (LoadKey), for the
// candidate slice it was built or checked from.
type loadIndex struct {
	base  *[]*scheduling.Endpoint // identity of the candidate slice
	first **scheduling.Endpoint
	n     int
	loads map[string]scheduling.EndpointLoad
}

// Producer is a view of the in-flight load per endpoint. It is safe for
// concurrent use.
type Producer struct {
	params      Params // as configured, accounting resolved
	typedName   scheduling.TypedName
	llmd        bool
	addOutput   bool
	outputRatio float64
	maxOutput   int64 // < 0: no cap
	entryKey    scheduling.StateKey[*entry]

	index      atomic.Pointer[loadIndex]
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

// Produce implements scheduling.DataProducer: it makes sure the
// candidates' host accounting is indexed, sets InFlightLoadKey to the
// producer's live view and, at most once per prune interval, drops idle
// counters.
func (p *Producer) Produce(_ context.Context, req *scheduling.Request, candidates []*scheduling.Endpoint) {
	p.maybePrune(candidates)
	p.indexLoads(candidates)
	if req != nil {
		scheduling.InFlightLoadKey.Set(req, p)
	}
}

// indexLoads makes the index cover the candidates' LoadKey values. The
// candidates of most requests are the same published slice, recognised
// by its address at no cost; a new slice (a new snapshot, or a subset) is
// checked once against the index, and the index is rebuilt only when an
// endpoint is missing or its accounting changed.
func (p *Producer) indexLoads(cands []*scheduling.Endpoint) {
	if len(cands) == 0 {
		return
	}
	idx := p.index.Load()
	if idx != nil && idx.first == &cands[0] && idx.n == len(cands) {
		return
	}
	if idx != nil && covers(idx.loads, cands) {
		if len(cands) >= idx.n {
			// A new snapshot's slice: remember it. A smaller set (a
			// subset hint) leaves the full set's slice in place.
			p.index.CompareAndSwap(idx, &loadIndex{first: &cands[0], n: len(cands), loads: idx.loads})
		}
		return
	}
	loads := make(map[string]scheduling.EndpointLoad, len(cands)+lenOf(idx))
	if idx != nil {
		for k, l := range idx.loads {
			loads[k] = l
		}
	}
	for _, e := range cands {
		if l, ok := scheduling.LoadKey.Get(e); ok && l != nil {
			loads[e.Key()] = l
		}
	}
	p.index.CompareAndSwap(idx, &loadIndex{first: &cands[0], n: len(cands), loads: loads})
}

func lenOf(idx *loadIndex) int {
	if idx == nil {
		return 0
	}
	return len(idx.loads)
}

// covers reports whether loads holds every candidate's current LoadKey
// value (and nothing for candidates without one).
func covers(loads map[string]scheduling.EndpointLoad, cands []*scheduling.Endpoint) bool {
	for _, e := range cands {
		l, ok := scheduling.LoadKey.Get(e)
		have, in := loads[e.Key()]
		if ok && l != nil {
			if !in || !sameLoad(have, l) {
				return false
			}
		} else if in {
			return false
		}
	}
	return true
}

// sameLoad compares two accountings; implementations of non-comparable
// types never compare equal (the index is then rebuilt).
func sameLoad(a, b scheduling.EndpointLoad) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// hostLoad returns the host's accounting of the endpoint with this key,
// as last indexed.
func (p *Producer) hostLoad(key string) (scheduling.EndpointLoad, bool) {
	idx := p.index.Load()
	if idx == nil {
		return nil, false
	}
	l, ok := idx.loads[key]
	return l, ok
}

// InFlight implements scheduling.InFlightLoad: the requests sent to the
// endpoint that have not completed, and their tokens still counted (see
// the package documentation for which source answers).
func (p *Producer) InFlight(endpointKey string) (requests, tokens int64) {
	if l, ok := p.hostLoad(endpointKey); ok {
		requests = max(l.InFlight(), 0)
		if !p.llmd {
			return requests, max(l.InFlightTokens(), 0)
		}
		_, tokens = p.own(endpointKey)
		return requests, tokens
	}
	return p.own(endpointKey)
}

// EndpointInFlight implements scheduling.EndpointInFlightLoad: InFlight
// for e without a request and without Produce having indexed e: the
// host's accounting is read from e itself (scheduling.LoadKey), the
// producer's own counters as in InFlight. The flow-control dispatcher's
// pool view (concurrency-detector's PoolSaturation) reads it.
func (p *Producer) EndpointInFlight(e *scheduling.Endpoint) (requests, tokens int64) {
	if l, ok := scheduling.LoadKey.Get(e); ok && l != nil {
		requests = max(l.InFlight(), 0)
		if !p.llmd {
			return requests, max(l.InFlightTokens(), 0)
		}
		_, tokens = p.own(e.Key())
		return requests, tokens
	}
	return p.own(e.Key())
}

// own returns the producer's own counts for an endpoint.
func (p *Producer) own(key string) (requests, tokens int64) {
	v, ok := p.counters.Load(key)
	if !ok {
		return 0, 0
	}
	c := v.(*counter)
	if c.holders.Load() < 0 {
		return 0, 0 // being pruned: it holds nothing
	}
	return max(c.requests.Load(), 0), max(c.tokens.Load(), 0)
}

// hostCounts reports whether the host accounts for requests sent to e.
func hostCounts(e *scheduling.Endpoint) bool {
	l, ok := scheduling.LoadKey.Get(e)
	return ok && l != nil
}

// PreRequest implements scheduling.PreRequest: it charges what the host
// does not count to the primary target (the endpoint the request is
// forwarded to first). A request charged before is moved to the new
// target; a request already completed is not charged.
func (p *Producer) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
	if req == nil {
		return
	}
	var target *scheduling.Endpoint
	for _, t := range result.Targets() {
		if t != nil {
			target = t
			break
		}
	}
	if target == nil {
		return
	}
	old, had := p.entryKey.Get(req)
	if old == completed {
		return
	}
	e := hosted
	if p.llmd || !hostCounts(target) {
		var prompt, held int64
		if p.llmd {
			in := scheduling.EstimateInputTokens(req)
			prompt = uncached(req, target, in)
			held = p.estimateOutput(req, in)
		} else {
			held = scheduling.EstimateTokens(req)
		}
		e = &entry{}
		p.chargeTo(&e.ch, target, prompt, held)
	}
	if e != hosted || had {
		p.entryKey.Set(req, e)
	}
	if had {
		releaseAll(old)
	}
}

// chargeTo charges prompt and held tokens, and the request itself when
// the host does not count it, to target's counter.
func (p *Producer) chargeTo(ch *charge, target *scheduling.Endpoint, prompt, held int64) {
	request := !hostCounts(target)
	ch.key = target.Key()
	ch.c = p.acquire(ch.key, prompt+held, request)
	ch.prompt.Store(prompt)
	ch.held.Store(held)
	ch.request.Store(request)
	ch.holding.Store(true)
}

// follow moves a request's charge to the endpoint that serves it, when the
// gateway fell back to another endpoint than the one charged, as the host
// moves its own count.
func (p *Producer) follow(req *scheduling.Request, target *scheduling.Endpoint) *entry {
	e, ok := p.entryKey.Get(req)
	if !ok || e.none || target == nil || e.ch.key == target.Key() {
		return e
	}
	moved := &entry{}
	prompt, held := e.ch.prompt.Load(), e.ch.held.Load()
	p.chargeTo(&moved.ch, target, prompt, held)
	p.entryKey.Set(req, moved)
	releaseAll(e)
	return moved
}

// ResponseReceived implements scheduling.ResponseReceived: when another
// endpoint than the one charged serves, the charge moves there.
func (p *Producer) ResponseReceived(_ context.Context, req *scheduling.Request, _ *scheduling.Response, target *scheduling.Endpoint) {
	if req != nil {
		p.follow(req, target)
	}
}

// ResponseStreaming implements scheduling.ResponseStreaming: it follows a
// fallback like ResponseReceived and, with llm-d's accounting, the first
// response body chunk releases the request's prompt tokens.
func (p *Producer) ResponseStreaming(_ context.Context, req *scheduling.Request, _ *scheduling.Response, _ []byte, target *scheduling.Endpoint) {
	if req == nil {
		return
	}
	e := p.follow(req, target)
	if p.llmd && e != nil && !e.none {
		release(&e.ch.prompt, &e.ch.c.tokens)
	}
}

// ResponseComplete implements scheduling.ResponseComplete: it releases all
// the request still holds, on the endpoint it is charged to.
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

// Forget drops an endpoint's counter, and the index of host counts (the
// next request rebuilds it), e.g. when the endpoint is deleted or its
// identity changed.
func (p *Producer) Forget(endpointKey string) {
	p.counters.Delete(endpointKey)
	p.index.Store(nil)
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

// releaseAll releases everything an entry still holds, once. The hold on
// the counter goes last: a counter without holders holds nothing and may
// be pruned.
func releaseAll(e *entry) {
	if e == nil || e.none {
		return
	}
	ch := &e.ch
	release(&ch.prompt, &ch.c.tokens)
	release(&ch.held, &ch.c.tokens)
	if ch.request.Swap(false) {
		decrementClamped(&ch.c.requests, 1)
	}
	if ch.holding.Swap(false) {
		decrementClamped(&ch.c.holders, 1)
	}
}

// acquire holds the endpoint's counter, creating it if needed, adds
// tokens and, when request is true, one request, and returns the counter
// it added to.
func (p *Producer) acquire(key string, tokens int64, request bool) *counter {
	for {
		v, ok := p.counters.Load(key)
		if !ok {
			v, _ = p.counters.LoadOrStore(key, new(counter))
		}
		c := v.(*counter)
		if c.holders.Add(1) <= 0 {
			// A prune is removing this counter; help it and retry.
			p.counters.CompareAndDelete(key, c)
			continue
		}
		if cur, _ := p.counters.Load(key); cur != any(c) {
			// Forgotten meanwhile: undo and retry on the live counter.
			decrementClamped(&c.holders, 1)
			continue
		}
		if request {
			c.requests.Add(1)
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

// prune drops the counters that hold no request and no token, were not
// targeted during the last prune interval and are not among candidates,
// and the index of host counts (rebuilt from the next candidates).
func (p *Producer) prune(candidates []*scheduling.Endpoint) {
	p.index.Store(nil)
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
		if c.holders.CompareAndSwap(0, dead) {
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
	_ scheduling.DataProducer         = (*Producer)(nil)
	_ scheduling.InFlightLoad         = (*Producer)(nil)
	_ scheduling.EndpointInFlightLoad = (*Producer)(nil)
	_ scheduling.PreRequest           = (*Producer)(nil)
	_ scheduling.ResponseReceived     = (*Producer)(nil)
	_ scheduling.ResponseStreaming    = (*Producer)(nil)
	_ scheduling.ResponseComplete     = (*Producer)(nil)
)
