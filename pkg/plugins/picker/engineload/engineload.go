// Package engineload provides the engine-load-picker, the EngineLoad
// selection strategy of the Continuum Router (C-19 … C-21): the candidate
// whose model server reports the shortest waiting queue wins, but only
// when every candidate's scraped metrics are fresh and the queues differ
// by more than a deadband; otherwise a base strategy picks.
//
// Each pick has one of three outcomes, counted in
// routing_engine_load_decisions_total{backend,reason}:
//   - strategy_stale_fallback: some candidate's metrics are older than
//     scrapeInterval × maxStalenessIntervals (or were never scraped): the
//     base strategy picks, so a mixed fleet where only some endpoints
//     report does not herd onto them;
//   - strategy_hysteresis_hold: all fresh, but max_w − min_w ≤
//     balanceAbsThreshold or max_w ≤ balanceRelThreshold × min_w (w the
//     waiting queues): the base strategy picks, so a queue that is only
//     refreshed once per scrape does not draw every request for a scrape
//     interval;
//   - strategy_engine_load: all fresh and the deadband open: the lowest
//     waiting queue wins (normalising by the largest queue keeps the
//     order), ties broken by the lower KV-cache usage, then by the base
//     strategy among those still tied.
//
// The base strategy (baseStrategy, RoundRobin by default, never
// EngineLoad) is an ordinary picker type. The configuration loader builds
// it from baseStrategy and baseStrategyParameters as a hidden instance
// named "<name>/base" before this picker, whose constructor finds it with
// Handle.Plugin; plugins never import each other.
package engineload

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pickmetrics"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

// Type is the plugin type used in configuration.
const Type = "engine-load-picker"

// Defaults of the Continuum Router (and of the vLLM router's and SGLang
// gateway's cache_aware deadband).
const (
	DefaultBalanceAbsThreshold   = 64
	DefaultBalanceRelThreshold   = 1.5
	DefaultMaxStalenessIntervals = 3
	// DefaultScrapeInterval is GIE's --refresh-metrics-interval default.
	DefaultScrapeInterval = 50 * time.Millisecond
	// MaxStalenessIntervalsLimit bounds maxStalenessIntervals.
	MaxStalenessIntervalsLimit = 1000
)

// The reason label values of routing_engine_load_decisions_total: the
// closed set of outcomes.
const (
	ReasonEngineLoad     = "strategy_engine_load"
	ReasonStaleFallback  = "strategy_stale_fallback"
	ReasonHysteresisHold = "strategy_hysteresis_hold"
)

// DecisionsMetric is the Continuum Router's name of the decision counter.
const DecisionsMetric = "routing_engine_load_decisions_total"

// Indexes of the reasons in Reasons().
const (
	reasonEngineLoadIdx = iota
	reasonStaleIdx
	reasonHysteresisIdx
	numReasons
)

// Reasons returns the closed set of reason label values.
func Reasons() []string {
	return []string{ReasonEngineLoad, ReasonStaleFallback, ReasonHysteresisHold}
}

// Params configures an engine-load-picker.
type Params struct {
	pick.Params
	// BalanceAbsThreshold: the deadband opens only when the largest and
	// smallest waiting queues differ by more than this. >= 0; default 64.
	BalanceAbsThreshold int `json:"balanceAbsThreshold"`
	// BalanceRelThreshold: the deadband opens only when the largest
	// waiting queue is more than this times the smallest. >= 1; default
	// 1.5.
	BalanceRelThreshold float64 `json:"balanceRelThreshold"`
	// BaseStrategy picks on stale metrics, inside the deadband and among
	// ties: RoundRobin, WeightedRoundRobin (recommended for mixed fleets),
	// LeastLatency, Random, ConsistentHash, PrefixAwareHash, LeastBusy or
	// LeastCost, in any case, PascalCase, snake_case or kebab-case; never
	// EngineLoad. Default RoundRobin.
	BaseStrategy string `json:"baseStrategy"`
	// BaseStrategyParameters are the parameters of the base strategy's
	// picker type, as strict as that type's own; maxNumOfEndpoints is not
	// one of them (this picker's applies).
	BaseStrategyParameters json.RawMessage `json:"baseStrategyParameters,omitempty"`
	// MaxStalenessIntervals: metrics older than this many scrape
	// intervals are stale. 1..1000; default 3.
	MaxStalenessIntervals int `json:"maxStalenessIntervals"`
	// ScrapeInterval is the model-server metrics scrape interval. Default:
	// the EPP's own (--refresh-metrics-interval, which the host passes to
	// plugins: scheduling.ScrapeIntervalOf), else "50ms", that flag's
	// default; > 0. A value that differs from the host's is used, with a
	// configuration warning.
	ScrapeInterval Duration `json:"scrapeInterval"`
}

// DefaultParams returns the defaults: deadband 64 / 1.5, base RoundRobin,
// freshness 3 × 50ms (New replaces the 50ms by the host's scrape
// interval when the parameters leave it out), one endpoint.
func DefaultParams() Params {
	return Params{
		Params:                pick.DefaultParams(),
		BalanceAbsThreshold:   DefaultBalanceAbsThreshold,
		BalanceRelThreshold:   DefaultBalanceRelThreshold,
		BaseStrategy:          strategies.Default,
		MaxStalenessIntervals: DefaultMaxStalenessIntervals,
		ScrapeInterval:        Duration{Duration: DefaultScrapeInterval},
	}
}

// Validate reports every invalid parameter, each prefixed by its field
// path.
func (p *Params) Validate() error {
	errs := []error{p.Params.Validate()}
	if p.BalanceAbsThreshold < 0 {
		errs = append(errs, fmt.Errorf("balanceAbsThreshold: must be >= 0, got %d", p.BalanceAbsThreshold))
	}
	if !(p.BalanceRelThreshold >= 1) || math.IsInf(p.BalanceRelThreshold, 1) {
		errs = append(errs, fmt.Errorf("balanceRelThreshold: must be a finite number >= 1, got %v", p.BalanceRelThreshold))
	}
	if canonical, _, err := strategies.Parse(p.BaseStrategy); err != nil {
		errs = append(errs, fmt.Errorf("baseStrategy: %w", err))
	} else if canonical == strategies.EngineLoad {
		errs = append(errs, fmt.Errorf("baseStrategy: must not be %s (the base strategy picks when engine load cannot)", strategies.EngineLoad))
	}
	if err := strategies.CheckNestedParameters(p.BaseStrategyParameters); err != nil {
		errs = append(errs, fmt.Errorf("baseStrategyParameters: %w", err))
	}
	if p.MaxStalenessIntervals < 1 || p.MaxStalenessIntervals > MaxStalenessIntervalsLimit {
		errs = append(errs, fmt.Errorf("maxStalenessIntervals: must be 1..%d, got %d", MaxStalenessIntervalsLimit, p.MaxStalenessIntervals))
	}
	if err := p.ScrapeInterval.parseErr; err != nil {
		errs = append(errs, fmt.Errorf("scrapeInterval: %w", err))
	} else if p.ScrapeInterval.Duration <= 0 {
		errs = append(errs, fmt.Errorf("scrapeInterval: must be > 0, got %q", p.ScrapeInterval.Duration.String()))
	}
	return errors.Join(errs...)
}

// Horizon is how old metrics may be and still be fresh: ScrapeInterval ×
// MaxStalenessIntervals.
func (p *Params) Horizon() time.Duration {
	return p.ScrapeInterval.Duration * time.Duration(p.MaxStalenessIntervals)
}

// Picker is an engine-load-picker instance. It is safe for concurrent
// use.
type Picker struct {
	pick.Base
	params  Params // effective: BaseStrategy canonical
	horizon time.Duration
	base    scheduling.Picker
	pbase   scheduling.ProfilePicker // base, when it is one
	log     logr.Logger
	now     func() time.Time

	decisions *pickmetrics.CounterVec
	children  *pickmetrics.Children[*backendSeries]
	stale     atomic.Bool // the last pick found stale metrics (logged on change)
	closed    atomic.Bool
}

// New returns an engine-load-picker. Its base strategy is the instance
// named strategies.BaseInstance(name), which the configuration loader
// builds before it; New fails when that instance is missing, not a
// picker, or of another type than baseStrategy's.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b, err := pick.NewBase(Type, name, p.Params, h)
	if err != nil {
		return nil, err
	}
	name = b.TypedName().Name
	canonical, pluginType, _ := strategies.Parse(p.BaseStrategy)
	p.BaseStrategy = canonical
	var intervalWarning string
	if host := scheduling.ScrapeIntervalOf(h); host > 0 {
		if !p.ScrapeInterval.set {
			p.ScrapeInterval = Duration{Duration: host}
		} else if p.ScrapeInterval.Duration != host {
			intervalWarning = ScrapeIntervalWarning(p.ScrapeInterval.Duration, host, p.MaxStalenessIntervals)
		}
	}
	baseName := strategies.BaseInstance(name)
	nested, ok := h.Plugin(baseName)
	if !ok {
		return nil, fmt.Errorf("baseStrategy: no %s instance %q: the configuration loader builds it from baseStrategy and baseStrategyParameters", pluginType, baseName)
	}
	if got := nested.TypedName().Type; got != pluginType {
		return nil, fmt.Errorf("baseStrategy: instance %q is a %s, want a %s for %s", baseName, got, pluginType, canonical)
	}
	base, ok := nested.(scheduling.Picker)
	if !ok {
		return nil, fmt.Errorf("baseStrategy: instance %q (%s) is not a picker", baseName, pluginType)
	}
	vec, err := pickmetrics.NewCounterVec(h.Registerer(), prometheus.CounterOpts{
		Name: DecisionsMetric,
		Help: "Picks of engine-load-picker instances by outcome: strategy_engine_load (all metrics fresh, the waiting-queue gap beyond the deadband: the lowest queue won), strategy_stale_fallback (some candidate's metrics stale: the base strategy picked), strategy_hysteresis_hold (inside the deadband: the base strategy picked); backend is the chosen endpoint, names beyond 256 folded into \"other\".",
	}, []string{"picker", "backend", "reason"})
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	pk := &Picker{
		Base:      b,
		params:    p,
		horizon:   p.Horizon(),
		base:      base,
		log:       h.Logger().WithValues("plugin", name),
		now:       time.Now,
		decisions: vec,
	}
	pk.pbase, _ = base.(scheduling.ProfilePicker)
	pk.children = pickmetrics.NewChildren(vec.Backends, func(backend string) *backendSeries {
		return &backendSeries{backend: backend}
	})
	pk.log.V(1).Info("Engine-load picker", "baseStrategy", canonical, "balanceAbsThreshold", p.BalanceAbsThreshold,
		"balanceRelThreshold", p.BalanceRelThreshold, "freshness", pk.horizon)
	if intervalWarning != "" {
		if wr, ok := h.(interface{ Warn(msg string) }); ok {
			wr.Warn(intervalWarning)
		} else {
			pk.log.Info("Warning: " + intervalWarning)
		}
	}
	return pk, nil
}

// backendSeries are the decision counters of one backend value, resolved
// on first use so a backend only exports the reasons it had.
type backendSeries struct {
	backend string
	c       [numReasons]atomic.Pointer[prometheus.Counter]
}

// EffectiveParams returns the parameters with the base strategy's
// canonical name.
func (p *Picker) EffectiveParams() any { return p.params }

// BaseStrategy returns the canonical name of the base strategy.
func (p *Picker) BaseStrategy() string { return p.params.BaseStrategy }

// BasePicker returns the base strategy's picker instance.
func (p *Picker) BasePicker() scheduling.Picker { return p.base }

// Pick implements scheduling.Picker.
func (p *Picker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.PickInProfile(ctx, req, scored, scheduling.PickInfo{})
}

// Waiting returns an endpoint's waiting queue as its metrics report it,
// negative values as 0.
func Waiting(e *scheduling.Endpoint) int { return max(e.Metrics().WaitingQueueSize, 0) }

// KVUsage returns an endpoint's KV-cache usage clamped to [0, 1] (NaN as
// 1: an unreadable value never wins a tie).
func KVUsage(e *scheduling.Endpoint) float64 {
	kv := e.Metrics().KVCacheUsagePercent
	if kv != kv {
		return 1
	}
	return min(max(kv, 0), 1)
}

// Fresh reports whether metrics scraped at t are fresh at now: scraped
// (t not zero) no longer than horizon ago.
func Fresh(t, now time.Time, horizon time.Duration) bool {
	return fresh(t, now.Add(-horizon))
}

// fresh reports whether metrics scraped at t are fresh given the oldest
// fresh time (cheaper per endpoint than Time.Sub).
func fresh(t, oldest time.Time) bool { return !t.IsZero() && !t.Before(oldest) }

// DeadbandOpen reports whether waiting queues spanning minW..maxW open
// the deadband: maxW − minW > abs and maxW > rel × minW.
func DeadbandOpen(minW, maxW, abs int, rel float64) bool {
	return maxW-minW > abs && float64(maxW) > rel*float64(minW)
}

// PickInProfile implements scheduling.ProfilePicker (info is passed on to
// a base strategy that is one). A call that only orders fallbacks
// (info.FallbacksOnly) counts no decision. Fallbacks (maxNumOfEndpoints > 1) are the
// base strategy's when it picked, else the next lowest waiting queues
// (KV usage breaking ties). Pick may reorder scored.
func (p *Picker) PickInProfile(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	n := len(scored)
	if n == 0 {
		return &scheduling.ProfileResult{}
	}
	now := p.now()
	oldest := now.Add(-p.horizon)
	minW, maxW := math.MaxInt, math.MinInt
	stale := -1
	for i := range scored {
		e := scored[i].Endpoint
		if !fresh(e.Metrics().UpdateTime, oldest) {
			stale = i
			break
		}
		w := Waiting(e)
		minW, maxW = min(minW, w), max(maxW, w)
	}
	var res *scheduling.ProfileResult
	var reason int
	switch {
	case stale >= 0:
		reason = reasonStaleIdx
		res = p.fill(p.runBase(ctx, req, scored, info), scored, n)
	case !DeadbandOpen(minW, maxW, p.params.BalanceAbsThreshold, p.params.BalanceRelThreshold):
		reason = reasonHysteresisIdx
		res = p.fill(p.runBase(ctx, req, scored, info), scored, n)
	default:
		reason = reasonEngineLoadIdx
		res = p.lowest(ctx, req, scored, info, minW)
	}
	p.transition(stale, scored, now)
	if !info.FallbacksOnly {
		p.record(reason, res, req, minW, maxW)
	}
	return res
}

// lowest picks the lowest waiting queue, the lower KV usage among equal
// queues, then the base strategy among those still tied.
func (p *Picker) lowest(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo, minW int) *scheduling.ProfileResult {
	bestKV := math.Inf(1)
	for i := range scored {
		if e := scored[i].Endpoint; Waiting(e) == minW {
			bestKV = min(bestKV, KVUsage(e))
		}
	}
	// Move the tied endpoints to the front, in input order.
	t := 0
	for i := range scored {
		if e := scored[i].Endpoint; Waiting(e) == minW && KVUsage(e) == bestKV {
			scored[t], scored[i] = scored[i], scored[t]
			t++
		}
	}
	k := min(p.Max, len(scored))
	var first []*scheduling.Endpoint
	if t == 1 {
		if k == 1 {
			return pick.Single(scored[0].Endpoint)
		}
		first = []*scheduling.Endpoint{scored[0].Endpoint}
	} else {
		res := p.runBase(ctx, req, scored[:t], info)
		switch {
		case k == 1 && len(res.Targets) == 1:
			return res
		case k == 1 && len(res.Targets) > 1:
			return pick.Single(res.Targets[0])
		}
		first = res.Targets
		if len(first) == 0 {
			first = []*scheduling.Endpoint{scored[0].Endpoint}
		}
	}
	targets := make([]*scheduling.Endpoint, 0, k)
	for _, e := range first {
		if len(targets) < k && !slices.Contains(targets, e) {
			targets = append(targets, e)
		}
	}
	if len(targets) < k {
		rest := slices.Clone(scored)
		slices.SortStableFunc(rest, func(a, b scheduling.ScoredEndpoint) int {
			if c := cmp.Compare(Waiting(a.Endpoint), Waiting(b.Endpoint)); c != 0 {
				return c
			}
			return cmp.Compare(KVUsage(a.Endpoint), KVUsage(b.Endpoint))
		})
		for _, s := range rest {
			if len(targets) == k {
				break
			}
			if !slices.Contains(targets, s.Endpoint) {
				targets = append(targets, s.Endpoint)
			}
		}
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// runBase lets the base strategy pick among scored.
func (p *Picker) runBase(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	var res *scheduling.ProfileResult
	if p.pbase != nil {
		res = p.pbase.PickInProfile(ctx, req, scored, info)
	} else {
		res = p.base.Pick(ctx, req, scored)
	}
	if res == nil {
		return &scheduling.ProfileResult{}
	}
	return res
}

// fill makes the base strategy's result hold min(Max, n) distinct
// targets: cut to Max, completed in candidate order if it returned fewer
// (a base picker that returns nothing gets the first candidate).
func (p *Picker) fill(res *scheduling.ProfileResult, scored []scheduling.ScoredEndpoint, n int) *scheduling.ProfileResult {
	k := min(p.Max, n)
	if len(res.Targets) == k {
		return res
	}
	if len(res.Targets) > k {
		return &scheduling.ProfileResult{Targets: res.Targets[:k]}
	}
	targets := append(make([]*scheduling.Endpoint, 0, k), res.Targets...)
	for i := 0; i < n && len(targets) < k; i++ {
		if e := scored[i].Endpoint; !slices.Contains(targets, e) {
			targets = append(targets, e)
		}
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// transition logs, once per change, that stale metrics send picks to the
// base strategy, and that they are fresh again.
func (p *Picker) transition(stale int, scored []scheduling.ScoredEndpoint, now time.Time) {
	isStale := stale >= 0
	if p.stale.Load() == isStale || p.stale.Swap(isStale) == isStale {
		return
	}
	l := p.log.V(1)
	if !l.Enabled() {
		return
	}
	if isStale {
		e := scored[stale].Endpoint
		age := "never scraped"
		if t := e.Metrics().UpdateTime; !t.IsZero() {
			age = now.Sub(t).String()
		}
		l.Info("Engine-load picker: a candidate's engine metrics are stale; the base strategy picks until all are fresh",
			"endpoint", e.String(), "age", age, "freshness", p.horizon, "baseStrategy", p.params.BaseStrategy)
		return
	}
	l.Info("Engine-load picker: every candidate's engine metrics are fresh again")
}

// record counts the pick and logs it at V(4).
func (p *Picker) record(reason int, res *scheduling.ProfileResult, req *scheduling.Request, minW, maxW int) {
	if len(res.Targets) == 0 || p.closed.Load() {
		return
	}
	target := res.Targets[0]
	s := p.children.Get(target.Name())
	c := s.c[reason].Load()
	if c == nil {
		v := p.decisions.WithLabelValues(p.TypedName().Name, s.backend, Reasons()[reason]) // idempotent under a race
		c = &v
		s.c[reason].Store(c)
	}
	(*c).Inc()
	if scheduling.Explaining(req) {
		scheduling.PickReasonKey.Set(req, Reasons()[reason])
	}
	if l := p.log.V(4); l.Enabled() {
		id := ""
		if req != nil {
			id = req.ID
		}
		l.Info("Engine-load pick", "reason", Reasons()[reason], "endpoint", target.String(), "minWaiting", minW, "maxWaiting", maxW, "request", id)
	}
}

// Close implements scheduling.Closer: the instance's decision series are
// deleted unless an instance of the same name serves on. The base
// instance is closed by the loader, which owns it.
func (p *Picker) Close(info scheduling.CloseInfo) {
	p.closed.Store(true)
	if !info.Successor {
		p.decisions.DeletePartialMatch(prometheus.Labels{"picker": p.TypedName().Name})
	}
}

// Duration is a time.Duration written in JSON as a Go duration string
// such as "50ms" or "1s". Numbers are rejected; a string that does not
// parse is kept as an error that Params.Validate reports with the field's
// path.
type Duration struct {
	time.Duration
	parseErr error
	set      bool // decoded from the parameters (not a default)
}

// UnmarshalJSON implements json.Unmarshaler. null leaves the value
// unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) == 0 || b[0] != '"' {
		kind := "number"
		switch {
		case len(b) == 0:
			kind = "nothing"
		case b[0] == '{':
			kind = "object"
		case b[0] == '[':
			kind = "array"
		case b[0] == 't' || b[0] == 'f':
			kind = "bool"
		}
		return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeFor[string]()}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		*d = Duration{parseErr: fmt.Errorf("invalid duration %q: use a Go duration such as \"50ms\" or \"1s\"", s), set: true}
		return nil
	}
	*d = Duration{Duration: v, set: true}
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }

// Registration registers the engine-load-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker        = (*Picker)(nil)
	_ scheduling.ProfilePicker = (*Picker)(nil)
	_ scheduling.Closer        = (*Picker)(nil)
	_ json.Unmarshaler         = (*Duration)(nil)
	_ json.Marshaler           = Duration{}
)
