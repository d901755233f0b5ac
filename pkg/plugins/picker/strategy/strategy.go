// Package strategy provides the strategy-picker: the Continuum Router's
// selection_strategy as a Switchyard picker, with its scorer precedence
// (C-02 … C-05).
//
// The profile's scorers run first. When they clearly decide, one
// endpoint's weighted score being at least scorerThreshold × the profile's
// total scorer weight and ahead of the runner-up's by at least
// scorerMargin × that weight, the strategy-picker takes that endpoint. Otherwise its strategy, one of the nine of
// pkg/scheduling/strategies, chooses among all the scored candidates.
//
// A term may ask for strict dominance instead (C-37) by setting
// scheduling.StrictDominanceKey on the request in Score, as the
// usage-weight-scorer does when its largest contribution is above 0 and
// strictly ahead of every other: then
// the endpoint whose total weighted score is strictly greater than every
// other decides, with no threshold or margin, and a tied top leaves the
// choice to the strategy. Every pick records who decided in
// scheduling.DecidedByKey.
//
// A strategy is an ordinary picker type (round-robin-picker, …). The
// configuration loader builds it from the strategy and strategyParameters
// parameters as a hidden instance named "<name>/strategy" before the
// strategy-picker, whose factory finds it with Handle.Plugin; plugins
// never import each other. The loader also applies the
// --selection-strategy flag and SWITCHYARD_SELECTION_STRATEGY, which
// override the strategy parameter (see pkg/config).
package strategy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

// Type is the plugin type used in configuration.
const Type = "strategy-picker"

// DefaultScorerThreshold is the default scorerThreshold.
const DefaultScorerThreshold = 0.3

// DefaultScorerMargin is the default scorerMargin: the top weighted score
// must lead the runner-up's by 5% of the profile's total weight (0.35 with
// the default profile's weights 2, 2, 3). The guide's scorers decide in
// steps (a KV overlap at or above its threshold); ours are continuous, so
// without a margin a lead of float noise would decide nearly every pick
// and the strategy would almost never run. 5% is a lead no rounding or
// jitter of normalised scores produces, yet small enough that a real
// preference (a cached prefix, a shorter queue) still decides.
const DefaultScorerMargin = 0.05

// Params configures a strategy-picker.
type Params struct {
	pick.Params
	// Strategy names the selection strategy: RoundRobin,
	// WeightedRoundRobin, LeastLatency, Random, ConsistentHash,
	// PrefixAwareHash, EngineLoad, LeastBusy or LeastCost, in any case,
	// PascalCase, snake_case or kebab-case. Default RoundRobin. The
	// --selection-strategy flag and SWITCHYARD_SELECTION_STRATEGY override
	// it.
	Strategy string `json:"strategy"`
	// StrategyParameters are the parameters of the strategy's picker type
	// (virtualNodes for ConsistentHash, …), checked as strictly as that
	// type's own. maxNumOfEndpoints is not one of them: the
	// strategy-picker's maxNumOfEndpoints applies to its strategy.
	StrategyParameters json.RawMessage `json:"strategyParameters,omitempty"`
	// ScorerThreshold is the fraction of the profile's total scorer weight
	// that an endpoint's weighted score must reach, while being strictly
	// the highest, for the scorers to decide. 0..1; default 0.3.
	ScorerThreshold float64 `json:"scorerThreshold"`
	// ScorerMargin is the fraction of the profile's total scorer weight by
	// which the top weighted score must beat the runner-up's for the
	// scorers to decide. 0..1; default 0.05. 0 means any strict lead.
	ScorerMargin float64 `json:"scorerMargin"`
}

// DefaultParams returns the default parameters: one endpoint, RoundRobin,
// threshold 0.3, margin 0.05.
func DefaultParams() Params {
	return Params{Params: pick.DefaultParams(), Strategy: strategies.Default, ScorerThreshold: DefaultScorerThreshold, ScorerMargin: DefaultScorerMargin}
}

// Validate reports every invalid parameter, each prefixed by its field
// path.
func (p *Params) Validate() error {
	errs := []error{p.Params.Validate()}
	if _, _, err := strategies.Parse(p.Strategy); err != nil {
		errs = append(errs, fmt.Errorf("strategy: %w", err))
	}
	if err := strategies.CheckNestedParameters(p.StrategyParameters); err != nil {
		errs = append(errs, fmt.Errorf("strategyParameters: %w", err))
	}
	if !(p.ScorerThreshold >= 0 && p.ScorerThreshold <= 1) {
		errs = append(errs, fmt.Errorf("scorerThreshold: must be a fraction in 0..1 of the profile's total scorer weight, got %v", p.ScorerThreshold))
	}
	if !(p.ScorerMargin >= 0 && p.ScorerMargin <= 1) {
		errs = append(errs, fmt.Errorf("scorerMargin: must be a fraction in 0..1 of the profile's total scorer weight, got %v", p.ScorerMargin))
	}
	return errors.Join(errs...)
}

// Picker is a strategy-picker instance. It is safe for concurrent use.
type Picker struct {
	pick.Base
	params    Params // effective: Strategy canonical
	threshold float64
	margin    float64
	strategy  scheduling.Picker
	pstrategy scheduling.ProfilePicker // strategy, when it is one
	log       logr.Logger

	metrics            *prometheus.CounterVec
	byScorers, byStrat prometheus.Counter
}

// New returns a strategy-picker. Its strategy is the instance named
// strategies.StrategyInstance(name), which the configuration loader builds
// before it; New fails when that instance is missing or of another type
// than the strategy's.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	base, err := pick.NewBase(Type, name, p.Params, h)
	if err != nil {
		return nil, err
	}
	name = base.TypedName().Name
	canonical, pluginType, _ := strategies.Parse(p.Strategy)
	p.Strategy = canonical
	nestedName := strategies.StrategyInstance(name)
	nested, ok := h.Plugin(nestedName)
	if !ok {
		return nil, fmt.Errorf("strategy: no %s instance %q: the configuration loader builds it from strategy and strategyParameters", pluginType, nestedName)
	}
	if got := nested.TypedName().Type; got != pluginType {
		return nil, fmt.Errorf("strategy: instance %q is a %s, want a %s for %s", nestedName, got, pluginType, canonical)
	}
	strat, ok := nested.(scheduling.Picker)
	if !ok {
		return nil, fmt.Errorf("strategy: instance %q (%s) is not a picker", nestedName, pluginType)
	}
	vec, err := registerOrReuse(h.Registerer(), prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_strategy_decisions_total",
		Help: "Picks of strategy-picker instances by what chose the primary endpoint: the profile's scorers (one endpoint scored clearly highest) or the selection strategy.",
	}, []string{"picker", "decided_by"}))
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	pk := &Picker{
		Base:      base,
		params:    p,
		threshold: p.ScorerThreshold,
		margin:    p.ScorerMargin,
		strategy:  strat,
		log:       h.Logger().WithValues("plugin", name),
		metrics:   vec,
		byScorers: vec.WithLabelValues(name, DecidedByScorers),
		byStrat:   vec.WithLabelValues(name, DecidedByStrategy),
	}
	pk.pstrategy, _ = strat.(scheduling.ProfilePicker)
	return pk, nil
}

// The values of the decided_by label: scheduling.DecidedByScorers and
// DecidedByStrategy as strings.
var (
	DecidedByScorers  = scheduling.DecidedByScorers.String()
	DecidedByStrategy = scheduling.DecidedByStrategy.String()
)

// Strategy returns the canonical name of the strategy in effect.
func (p *Picker) Strategy() string { return p.params.Strategy }

// StrategyPicker returns the strategy's picker instance.
func (p *Picker) StrategyPicker() scheduling.Picker { return p.strategy }

// EffectiveParams returns the parameters with the strategy's canonical
// name (what `epp validate -o yaml` shows and reloads compare).
func (p *Picker) EffectiveParams() any { return p.params }

// explainReason records why the strategy's choice was made, for an
// explained request (scheduling.PickReasonKey): the strategy's name, and
// after a "/" the reason the strategy itself gave, if any (e.g.
// "engine-load/hysteresis").
func (p *Picker) explainReason(req *scheduling.Request) {
	reason := p.params.Strategy
	if why, ok := scheduling.PickReasonKey.Get(req); ok && why != "" {
		reason += "/" + why
	}
	scheduling.PickReasonKey.Set(req, reason)
}

// Pick implements scheduling.Picker. Without a profile's total weight the
// scorers cannot be judged, so the strategy decides.
func (p *Picker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.PickInProfile(ctx, req, scored, scheduling.PickInfo{})
}

// PickInProfile implements scheduling.ProfilePicker. When a scorer set
// scheduling.StrictDominanceKey on the request (the usage-weight-scorer
// with a strictly largest contribution above 0, C-37), the endpoint whose total weighted
// score is strictly greater than every other one's decides, with no
// threshold and no margin, and a tie at the top leaves the choice to the
// strategy. Otherwise, when one endpoint's
// weighted score is at least scorerThreshold × info.TotalWeight (which
// must be positive) and beats every other one by at least scorerMargin ×
// info.TotalWeight (strictly, when the margin is 0), the scorers decided and that
// endpoint is the primary target; otherwise the strategy chooses among all
// of scored. Fallbacks (maxNumOfEndpoints > 1) follow the primary in the
// strategy's order; when the scorers decided, the strategy is asked for
// that order with info.FallbacksOnly, so that it records no pick. Pick may
// reorder scored.
func (p *Picker) PickInProfile(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	// A term that asked for strict dominance (C-37) is read and cleared
	// on every call, also when nothing is scored, so that no later
	// profile inherits it.
	strict := scheduling.TakeStrictDominance(req)
	if len(scored) == 0 {
		return &scheduling.ProfileResult{}
	}
	var top int
	if strict {
		top = scheduling.StrictlyDominant(scored)
	} else {
		top = p.decided(scored, info.TotalWeight)
	}
	if top < 0 {
		p.byStrat.Inc()
		if req != nil && !info.FallbacksOnly {
			scheduling.DecidedByKey.Set(req, scheduling.DecidedByStrategy)
		}
		res := p.runStrategy(ctx, req, scored, info)
		if !info.FallbacksOnly && scheduling.Explaining(req) {
			p.explainReason(req)
		}
		if l := p.log.V(4); l.Enabled() && len(res.Targets) > 0 {
			l.Info("Strategy picker: the strategy decided", "strategy", p.params.Strategy, "endpoint", res.Targets[0].String(), "request", requestID(req))
		}
		return res
	}
	chosen := scored[top]
	p.byScorers.Inc()
	if req != nil && !info.FallbacksOnly {
		scheduling.DecidedByKey.Set(req, scheduling.DecidedByScorers)
	}
	if l := p.log.V(4); l.Enabled() {
		l.Info("Strategy picker: the scorers decided", "endpoint", chosen.Endpoint.String(), "score", chosen.Score, "strictDominance", strict,
			"threshold", p.threshold*info.TotalWeight, "margin", p.margin*info.TotalWeight, "totalWeight", info.TotalWeight, "request", requestID(req))
	}
	if p.Max == 1 {
		return pick.Single(chosen.Endpoint)
	}
	// The strategy only orders the fallbacks: it must not count this as a
	// pick of its own (rotations, decision counters, statistics).
	fallbacks := info
	fallbacks.FallbacksOnly = true
	rest := p.runStrategy(ctx, req, scored, fallbacks).Targets
	if scheduling.Explaining(req) {
		// The scorers chose the primary (DecidedByKey says so): a reason
		// the strategy gave while ordering the fallbacks is not why.
		scheduling.PickReasonKey.Delete(req)
	}
	targets := make([]*scheduling.Endpoint, 1, min(p.Max, len(scored)))
	targets[0] = chosen.Endpoint
	for _, e := range rest {
		if len(targets) == cap(targets) {
			break
		}
		if e != chosen.Endpoint {
			targets = append(targets, e)
		}
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// decided returns the index of the endpoint the scorers chose, or -1: the
// highest score, if it reaches the threshold of a positive total weight
// and leads the runner-up by the margin (a lone candidate has no
// runner-up). A tie at the top never decides.
func (p *Picker) decided(scored []scheduling.ScoredEndpoint, totalWeight float64) int {
	if !(totalWeight > 0) || math.IsInf(totalWeight, 1) {
		return -1
	}
	best, second := 0, math.Inf(-1)
	for i := 1; i < len(scored); i++ {
		if s := scored[i].Score; s > scored[best].Score {
			second = scored[best].Score
			best = i
		} else if s > second {
			second = s
		}
	}
	top := scored[best].Score
	if !(top >= p.threshold*totalWeight) || !(top > second) || !(top-second >= p.margin*totalWeight) {
		return -1
	}
	return best
}

// runStrategy lets the strategy pick among scored.
func (p *Picker) runStrategy(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	var res *scheduling.ProfileResult
	if p.pstrategy != nil {
		res = p.pstrategy.PickInProfile(ctx, req, scored, info)
	} else {
		res = p.strategy.Pick(ctx, req, scored)
	}
	if res == nil {
		return &scheduling.ProfileResult{}
	}
	return res
}

func requestID(req *scheduling.Request) string {
	if req == nil {
		return ""
	}
	return req.ID
}

// Close implements scheduling.Closer: the instance's decision series are
// deleted unless an instance of the same name serves on. The strategy
// instance is closed by the loader, which owns it.
func (p *Picker) Close(info scheduling.CloseInfo) {
	if info.Successor {
		return
	}
	name := p.TypedName().Name
	p.metrics.DeleteLabelValues(name, DecidedByScorers)
	p.metrics.DeleteLabelValues(name, DecidedByStrategy)
}

// registerOrReuse registers c, or returns the collector already registered
// under the same description (another instance, or a configuration
// reload).
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// Registration registers the strategy-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker        = (*Picker)(nil)
	_ scheduling.ProfilePicker = (*Picker)(nil)
	_ scheduling.Closer        = (*Picker)(nil)
)
