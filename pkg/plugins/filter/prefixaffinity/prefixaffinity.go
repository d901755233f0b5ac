// Package prefixaffinity implements GIE's prefix-cache-affinity-filter: it
// narrows the candidates to the "sticky" endpoints that already hold most of
// the prompt's prefix. With a small probability it skips filtering to
// explore.
//
// GIE v1.5 breaks stickiness when the sticky endpoints' predicted time to
// first token (TTFT) is worse than the best other endpoint's by more than a
// penalty, but only with its latency-predictor sidecar, which Switchyard
// does not have: without it the gate never fires. The default ttftSource
// "none" does the same. ttftSource "prefillThroughput" (llm-d's key and
// value) turns on a gate on a TTFT estimated from the data at hand.
//
// Several instances with different thresholds can be chained (for example
// 0.99 as a global gate and 0.80 within a tier).
package prefixaffinity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "prefix-cache-affinity-filter"

// prefixProducerType is the producer of the prefix match the loader adds
// when a configuration has none (see DefaultProducer).
const prefixProducerType = "approx-prefix-cache-producer"

// charsPerToken estimates prompt tokens from bytes when the request carries
// no token count, as the prefix producer does.
const charsPerToken = 4

// Values of ttftSource.
const (
	// TTFTSourceNone turns the TTFT load gate off: the sticky endpoints are
	// always kept, as in GIE v1.5 without a latency predictor. Default.
	TTFTSourceNone = "none"
	// TTFTSourcePrefillThroughput gates on a TTFT estimated from queued
	// and uncached prompt tokens and peakPrefillThroughput (llm-d's value).
	TTFTSourcePrefillThroughput = "prefillThroughput"
	// ttftSourceLatencyPredictor is llm-d's other value. It needs a latency
	// predictor, which Switchyard does not have, so it is rejected.
	ttftSourceLatencyPredictor = "latencyPredictor"
)

// Params configures the filter. The first three keys are GIE v1.5's;
// ttftSource and peakPrefillThroughput are llm-d's.
type Params struct {
	// AffinityThreshold is the prefix match ratio (matched / total blocks)
	// at or above which an endpoint is sticky. In [0, 1]; 0 disables the
	// filter. Default 0.80.
	AffinityThreshold float64 `json:"affinityThreshold"`
	// ExplorationProbability is the probability of keeping every endpoint
	// for a request, so other endpoints warm up too. In [0, 1]. Default
	// 0.01.
	ExplorationProbability float64 `json:"explorationProbability"`
	// MaxTTFTPenaltyMs is how much worse, in milliseconds, the best sticky
	// endpoint's TTFT may be than the best other endpoint's before
	// stickiness is broken and every endpoint is kept. 0 always sticks.
	// Used only when ttftSource is "prefillThroughput". Default 5000.
	MaxTTFTPenaltyMs float64 `json:"maxTTFTPenaltyMs"`
	// TTFTSource selects the TTFT the load gate compares: "none" (no gate,
	// as GIE v1.5 without a latency predictor) or "prefillThroughput" (an
	// estimate from queued and uncached prompt tokens). Default "none".
	TTFTSource string `json:"ttftSource"`
	// PeakPrefillThroughput is an endpoint's prefill rate in tokens per
	// second, used by the "prefillThroughput" estimate to turn prompt
	// tokens into milliseconds. > 0. Default 15928 (llm-d's calibration for
	// Qwen 32B on 2×H100).
	PeakPrefillThroughput float64 `json:"peakPrefillThroughput"`
}

// DefaultParams returns GIE v1.5's defaults, with the TTFT gate off as in
// GIE without a latency predictor, and llm-d's throughput.
func DefaultParams() Params {
	return Params{
		AffinityThreshold:      0.80,
		ExplorationProbability: 0.01,
		MaxTTFTPenaltyMs:       5000,
		TTFTSource:             TTFTSourceNone,
		PeakPrefillThroughput:  15928,
	}
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	if !(p.AffinityThreshold >= 0 && p.AffinityThreshold <= 1) {
		errs = append(errs, fmt.Errorf("affinityThreshold: must be in [0, 1], got %v", p.AffinityThreshold))
	}
	if !(p.ExplorationProbability >= 0 && p.ExplorationProbability <= 1) {
		errs = append(errs, fmt.Errorf("explorationProbability: must be in [0, 1], got %v", p.ExplorationProbability))
	}
	if !(p.MaxTTFTPenaltyMs >= 0) || math.IsInf(p.MaxTTFTPenaltyMs, 0) {
		errs = append(errs, fmt.Errorf("maxTTFTPenaltyMs: must be >= 0, got %v", p.MaxTTFTPenaltyMs))
	}
	switch p.TTFTSource {
	case TTFTSourceNone, TTFTSourcePrefillThroughput:
	case ttftSourceLatencyPredictor:
		errs = append(errs, fmt.Errorf("ttftSource: %q needs a latency predictor, which Switchyard does not have; use %q (GIE v1.5's behaviour without one) or %q", p.TTFTSource, TTFTSourceNone, TTFTSourcePrefillThroughput))
	default:
		errs = append(errs, fmt.Errorf("ttftSource: must be %q or %q, got %q", TTFTSourceNone, TTFTSourcePrefillThroughput, p.TTFTSource))
	}
	if !(p.PeakPrefillThroughput > 0) || math.IsInf(p.PeakPrefillThroughput, 0) {
		errs = append(errs, fmt.Errorf("peakPrefillThroughput: must be > 0, got %v", p.PeakPrefillThroughput))
	}
	return errors.Join(errs...)
}

// Filter is the prefix-cache-affinity-filter. It is safe for concurrent
// use.
type Filter struct {
	typedName scheduling.TypedName
	params    Params
	// gate is set when the TTFT load gate is on: ttftSource
	// "prefillThroughput" and maxTTFTPenaltyMs > 0.
	gate bool
	rng  *rand.Rand
}

// New builds a prefix-cache-affinity-filter.
func New(name string, p Params, h scheduling.Handle) (*Filter, error) {
	if h == nil {
		return nil, errors.New("nil handle")
	}
	if name == "" {
		name = Type
	}
	return &Filter{
		typedName: scheduling.TypedName{Type: Type, Name: name},
		params:    p,
		gate:      p.TTFTSource == TTFTSourcePrefillThroughput && p.MaxTTFTPenaltyMs > 0,
		rng:       h.Rand(name),
	}, nil
}

// TypedName implements scheduling.Plugin.
func (f *Filter) TypedName() scheduling.TypedName { return f.typedName }

// Consumes implements scheduling.DataConsumer. The in-flight load is used
// by the "prefillThroughput" estimate when present but not required.
func (f *Filter) Consumes() []string { return []string{scheduling.PrefixMatchKey.Name()} }

// DefaultProducer implements scheduling.DefaultProducer: without a
// configured producer of the prefix match, the loader adds an
// approx-prefix-cache-producer. The filter passes no parameters, so a
// prefix-cache-scorer's parameters win when one is configured; otherwise
// the producer takes its defaults.
func (f *Filter) DefaultProducer(key string) (pluginType string, params []byte, ok bool) {
	if key == scheduling.PrefixMatchKey.Name() {
		return prefixProducerType, nil, true
	}
	return "", nil, false
}

// Filter implements scheduling.Filter. It returns the sticky endpoints
// (prefix match ratio >= affinityThreshold), or every endpoint when there is
// none, when exploring, or, with the TTFT gate on, when the sticky ones are
// too slow.
func (f *Filter) Filter(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	if len(endpoints) <= 1 || f.params.AffinityThreshold <= 0 {
		return endpoints
	}
	if f.params.ExplorationProbability > 0 && f.rng.Float64() < f.params.ExplorationProbability {
		return endpoints
	}
	pm, ok := scheduling.PrefixMatchKey.Get(req)
	if !ok || pm == nil || pm.TotalBlocks <= 0 {
		return endpoints
	}
	hits := pm.HitCount()
	if hits == 0 {
		return endpoints
	}
	total := float64(pm.TotalBlocks)
	// Only endpoints with a hit can be sticky: without a hit at or above
	// the threshold there is nothing to narrow to, and no endpoint to scan.
	// With few hits (the usual case) the same pass collects a 256-bit
	// signature of their keys, which spares almost every other endpoint
	// the lookup of its matched blocks.
	useSig := hits <= signatureMaxKeys
	var scan struct { // one allocation for what the callback sets
		sticky bool
		sig    [4]uint64
	}
	pm.Hits.Range(func(k string, m int) bool {
		if float64(m)/total >= f.params.AffinityThreshold {
			scan.sticky = true
		}
		if useSig {
			b := keySignature(k)
			scan.sig[b>>6] |= 1 << (b & 63)
		}
		return useSig || !scan.sticky
	})
	if !scan.sticky {
		return endpoints
	}
	gate := f.gate
	var est ttftEstimator
	if gate {
		est = newTTFTEstimator(req, f.params.PeakPrefillThroughput)
	}

	sticky := make([]*scheduling.Endpoint, 0, min(hits, len(endpoints)))
	bestSticky, bestOther := math.Inf(1), math.Inf(1)
	for _, e := range endpoints {
		matched := 0
		if !useSig {
			matched = pm.MatchedBlocks(e)
		} else if b := keySignature(e.Key()); scan.sig[b>>6]&(1<<(b&63)) != 0 {
			matched = pm.MatchedBlocks(e)
		}
		ratio := float64(matched) / total
		if ratio >= f.params.AffinityThreshold {
			sticky = append(sticky, e)
			if gate {
				bestSticky = min(bestSticky, est.ttftMs(e, ratio))
			}
		} else if gate {
			bestOther = min(bestOther, est.ttftMs(e, ratio))
		}
	}
	switch {
	case len(sticky) == 0 || len(sticky) == len(endpoints):
		return endpoints
	case gate && bestSticky-bestOther > f.params.MaxTTFTPenaltyMs:
		return endpoints
	}
	return sticky
}

// signatureMaxKeys is the largest number of hits Filter screens by
// signature; beyond it most bits would be set.
const signatureMaxKeys = 32

// keySignature maps an endpoint key to one of 256 bits from its length and
// a few of its bytes (endpoint keys differ in their ends and middles).
func keySignature(k string) uint8 {
	n := len(k)
	if n == 0 {
		return 0
	}
	x := uint64(n) | uint64(k[n-1])<<8 | uint64(k[n/2])<<16 | uint64(k[(3*n)/4])<<24 | uint64(k[max(n-2, 0)])<<32 | uint64(k[max(n-3, 0)])<<40
	return uint8((x * 0x9E3779B97F4A7C15) >> 56)
}

// ttftEstimator estimates an endpoint's time to first token for the
// request, for ttftSource "prefillThroughput". GIE v1.5 reads the TTFT
// predicted by its latency-predictor sidecar, which Switchyard does not
// have. This is an estimate from the data at hand, after llm-d's
// "prefillThroughput" source: the prompt tokens queued ahead on the
// endpoint plus the request's own uncached tokens, divided by the peak
// prefill throughput.
//
// The queued tokens are the endpoint's in-flight uncached tokens when an
// in-flight load producer ran (as in llm-d). Otherwise they are the
// endpoint's waiting queue size times this request's prompt length, the
// only request size known.
type ttftEstimator struct {
	load         scheduling.InFlightLoad
	promptTokens float64
	msPerToken   float64
}

func newTTFTEstimator(req *scheduling.Request, peakTokensPerSecond float64) ttftEstimator {
	load, _ := scheduling.InFlightLoadKey.Get(req)
	tokens := req.PromptTokens
	if tokens <= 0 {
		tokens = len(req.Prompt.Text) / charsPerToken
	}
	return ttftEstimator{load: load, promptTokens: float64(tokens), msPerToken: 1000 / peakTokensPerSecond}
}

// ttftMs returns the estimate in milliseconds for an endpoint whose prefix
// match ratio is ratio.
func (t ttftEstimator) ttftMs(e *scheduling.Endpoint, ratio float64) float64 {
	var queued float64
	if t.load != nil {
		_, tokens := t.load.InFlight(e.Key())
		queued = float64(tokens)
	} else {
		queued = float64(e.Metrics().WaitingQueueSize) * t.promptTokens
	}
	own := (1 - min(ratio, 1)) * t.promptTokens
	return (queued + own) * t.msPerToken
}

// Registration registers prefix-cache-affinity-filter.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

// Interface guards.
var (
	_ scheduling.Filter          = (*Filter)(nil)
	_ scheduling.DataConsumer    = (*Filter)(nil)
	_ scheduling.DefaultProducer = (*Filter)(nil)
)
