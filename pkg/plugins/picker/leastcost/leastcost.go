// Package leastcost provides the least-cost-picker, the LeastCost
// selection strategy of the Continuum Router (C-23 … C-27): the candidate
// where the request costs least wins.
//
// A request's cost at an endpoint is input tokens × input price + output
// tokens × output price, prices in USD per 1M tokens. The price of the
// request's model at an endpoint is the endpoint's own (its declared model
// entry's pricing, scheduling.ModelsKey), else the picker's catalog's; an
// entry whose pricing declares nothing (pricing: null or {}: the entry's
// Unpriced) shadows the catalog and leaves the endpoint unpriced for that
// model, while an entry without a pricing key takes the catalog's price. Unpriced endpoints rank after every priced one
// (never as free); with none priced the picker takes turns like
// RoundRobin. Equal costs go to the lower output price, then take turns
// by the instance's rotation counter.
//
// Tokens are the parser's tokenizer-free estimate of the prompt and the
// request's output cap (max_tokens, max_completion_tokens,
// max_output_tokens); a request without a body is sized at 1M input and 0
// output tokens, so it ranks by input price (Tokens).
package leastcost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pickmetrics"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "least-cost-picker"

// The sizing of a request that reached the picker without a body (C-25).
const (
	BodylessInputTokens  = 1_000_000
	BodylessOutputTokens = 0
)

// MaxCatalogModels bounds the catalog.
const MaxCatalogModels = 10000

// Params configures a least-cost-picker.
type Params struct {
	pick.Params
	// Catalog maps model names to their price, in USD per 1M input and
	// output tokens: the fallback for endpoints that declare no entry for
	// the model. Prices are finite and >= 0. Default empty.
	Catalog map[string]scheduling.Price `json:"catalog,omitempty"`
}

// DefaultParams returns the default parameters: one endpoint, an empty
// catalog.
func DefaultParams() Params { return Params{Params: pick.DefaultParams()} }

// Validate reports every invalid parameter, each prefixed by its field
// path.
func (p *Params) Validate() error {
	errs := []error{p.Params.Validate()}
	if len(p.Catalog) > MaxCatalogModels {
		errs = append(errs, fmt.Errorf("catalog: at most %d models, got %d", MaxCatalogModels, len(p.Catalog)))
	}
	models := make([]string, 0, len(p.Catalog))
	for m := range p.Catalog {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		path := "catalog[" + strconv.Quote(m) + "]"
		if m == "" {
			errs = append(errs, fmt.Errorf("%s: the model name must not be empty", path))
		}
		price := p.Catalog[m]
		if !validPrice(price.Input) {
			errs = append(errs, fmt.Errorf("%s.input: must be a finite price >= 0 (USD per 1M tokens), got %v", path, price.Input))
		}
		if !validPrice(price.Output) {
			errs = append(errs, fmt.Errorf("%s.output: must be a finite price >= 0 (USD per 1M tokens), got %v", path, price.Output))
		}
	}
	return errors.Join(errs...)
}

func validPrice(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// Picker is a least-cost-picker instance. It is safe for concurrent use.
type Picker struct {
	pick.Base
	catalog map[string]scheduling.Price
	turn    pick.Rotation

	decisions          *prometheus.CounterVec
	cheapest, rotation prometheus.Counter
}

// The outcome label values of switchyard_least_cost_decisions_total.
const (
	// OutcomeCheapest: some candidate was priced; the cheapest won.
	OutcomeCheapest = "cheapest"
	// OutcomeUnpriced: no candidate was priced for the model; the picker
	// took turns like RoundRobin.
	OutcomeUnpriced = "all_unpriced"
	// DecisionsMetric counts picks by outcome.
	DecisionsMetric = "switchyard_least_cost_decisions_total"
)

// New returns a least-cost-picker.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	base, err := pick.NewBase(Type, name, p.Params, h)
	if err != nil {
		return nil, err
	}
	name = base.TypedName().Name
	vec, err := pickmetrics.RegisterOrReuse(h.Registerer(), prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: DecisionsMetric,
		Help: "Picks of least-cost-picker instances by outcome: cheapest (some candidate was priced for the request's model) or all_unpriced (none was: the picker took turns like RoundRobin).",
	}, []string{"picker", "outcome"}))
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return &Picker{
		Base:      base,
		catalog:   p.Catalog,
		decisions: vec,
		cheapest:  vec.WithLabelValues(name, OutcomeCheapest),
		rotation:  vec.WithLabelValues(name, OutcomeUnpriced),
	}, nil
}

// ModelKey is the model a request is priced for: the model it is sent to
// after rewrites, else the model the client named.
func ModelKey(req *scheduling.Request) string {
	if req == nil {
		return ""
	}
	if req.TargetModel != "" {
		return req.TargetModel
	}
	return req.Model
}

// LookupPrice returns the price of model at e (C-23): the entry e declares
// for it (by name or alias), when it has one: its pricing, or unpriced
// when the entry has none (the entry shadows the catalog); else the
// catalog's price for model. An invalid declared price (negative, NaN,
// infinite) counts as unpriced.
func LookupPrice(e *scheduling.Endpoint, model string, catalog map[string]scheduling.Price) (scheduling.Price, bool) {
	if models, ok := scheduling.ModelsKey.Get(e); ok && models != nil {
		if entry, ok := models.Lookup(model); ok {
			switch {
			case entry.Unpriced:
				// A pricing block that declares nothing shadows the catalog.
				return scheduling.Price{}, false
			case entry.Pricing != nil:
				if !validPrice(entry.Pricing.Input) || !validPrice(entry.Pricing.Output) {
					return scheduling.Price{}, false
				}
				return *entry.Pricing, true
			}
			// An entry without pricing takes the catalog's price.
		}
	}
	price, ok := catalog[model]
	return price, ok
}

// Tokens returns the input and output tokens a request is priced for
// (C-25): the parser's tokenizer-free prompt estimate (PromptTokens; for
// a body that was not parsed, its bytes / 4) and the output cap
// (MaxOutputTokens: max_tokens or max_completion_tokens for chat,
// max_output_tokens for Responses, max_tokens for Anthropic; 0 when
// absent). A request without a body or prompt (audio, tokenize, realtime
// paths) is sized at BodylessInputTokens and BodylessOutputTokens.
func Tokens(req *scheduling.Request) (input, output int64) {
	switch {
	case req == nil:
		return BodylessInputTokens, BodylessOutputTokens
	case req.PromptTokens > 0:
		return int64(req.PromptTokens), int64(max(req.MaxOutputTokens, 0))
	case req.BodyBytes > 0:
		return max(int64(req.BodyBytes)/4, 1), int64(max(req.MaxOutputTokens, 0))
	case len(req.Prompt.Text) > 0 || len(req.Prompt.Messages) > 0:
		return max((int64(len(req.Prompt.Text))+2)/4, 1), int64(max(req.MaxOutputTokens, 0))
	}
	return BodylessInputTokens, BodylessOutputTokens
}

// Cost returns the cost in USD of input and output tokens at price.
func Cost(price scheduling.Price, input, output int64) float64 {
	return float64(input)*price.Input/1e6 + float64(output)*price.Output/1e6
}

// quote is one candidate's price for the request.
type quote struct {
	cost, output float64
	priced       bool
}

// compareQuotes orders quotes: priced before unpriced, then by cost, then by
// output price.
func compareQuotes(a, b quote) int {
	switch {
	case a.priced != b.priced:
		if a.priced {
			return -1
		}
		return 1
	case !a.priced:
		return 0
	}
	if c := cmp.Compare(a.cost, b.cost); c != 0 {
		return c
	}
	return cmp.Compare(a.output, b.output)
}

type scratch struct {
	quotes []quote
	order  []int32
	keys   []uint64
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Pick implements scheduling.Picker: the cheapest candidate for the
// request's model and size; equal costs go to the lower output price,
// then take turns (turn k of t tied candidates goes to the (k mod t)-th in
// input order); unpriced candidates come last, and with none priced the
// candidates take turns in order. Fallbacks (maxNumOfEndpoints > 1)
// follow in the same order. Pick does not modify scored.
func (p *Picker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.PickInProfile(ctx, req, scored, scheduling.PickInfo{})
}

// PickInProfile implements scheduling.ProfilePicker: Pick, but a call that
// only orders fallbacks (info.FallbacksOnly) does not advance the rotation among ties or count a decision.
func (p *Picker) PickInProfile(_ context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	n := len(scored)
	if n == 0 {
		return &scheduling.ProfileResult{}
	}
	turn := p.turn.Turn(info)
	model := ModelKey(req)
	in, out := Tokens(req)
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	quotes := slices.Grow(s.quotes[:0], n)[:n]
	s.quotes = quotes
	best, ties, priced := -1, 0, 0
	for i := range scored {
		price, ok := LookupPrice(scored[i].Endpoint, model, p.catalog)
		q := quote{priced: ok}
		if ok {
			q.cost, q.output = Cost(price, in, out), price.Output
			priced++
		}
		quotes[i] = q
		switch {
		case !ok:
		case best < 0:
			best, ties = i, 1
		default:
			switch c := compareQuotes(q, quotes[best]); {
			case c < 0:
				best, ties = i, 1
			case c == 0:
				ties++
			}
		}
	}
	if priced == 0 {
		if !info.FallbacksOnly {
			p.rotation.Inc()
		}
		return pick.Rotated(scored, turn, p.Max)
	}
	if !info.FallbacksOnly {
		p.cheapest.Inc()
	}
	if p.Max == 1 {
		j := int(turn % uint64(ties))
		for i := range quotes {
			if compareQuotes(quotes[i], quotes[best]) == 0 {
				if j == 0 {
					return pick.Single(scored[i].Endpoint)
				}
				j--
			}
		}
	}
	// Rank the quotes densely (equal quotes share a rank) and let the
	// rotation order each rank's ties.
	order := slices.Grow(s.order[:0], n)[:n]
	s.order = order
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return compareQuotes(quotes[a], quotes[b]) })
	keys := slices.Grow(s.keys[:0], n)[:n]
	s.keys = keys
	rank := uint64(0)
	for r, i := range order {
		if r > 0 && compareQuotes(quotes[order[r-1]], quotes[i]) != 0 {
			rank++
		}
		keys[i] = rank
	}
	return pick.AscendingRotated(scored, keys, turn, p.Max)
}

// Close implements scheduling.Closer: the instance's series are deleted
// unless an instance of the same name serves on.
func (p *Picker) Close(info scheduling.CloseInfo) {
	if !info.Successor {
		p.decisions.DeletePartialMatch(prometheus.Labels{"picker": p.TypedName().Name})
	}
}

// PricingWarnings returns the C-26 warnings for a least-cost-picker with
// parameters p over endpoints (the active ones; the host calls it when
// they are known: the server, `epp validate --endpoints-file`): for each
// model some endpoint declares (scheduling.ModelsKey; only declared models
// are checked), served by two or more endpoints of which fewer than two
// are priced, "model X is served by N endpoints but only K are priced".
// Endpoints that declare no models serve every model and take the
// catalog's price. Warnings come in model name order.
func PricingWarnings(endpoints []*scheduling.Endpoint, p Params) []string {
	declared := map[string]bool{}
	for _, e := range endpoints {
		if models, ok := scheduling.ModelsKey.Get(e); ok && models != nil {
			for _, entry := range models.Entries {
				declared[entry.Name] = true
			}
		}
	}
	names := make([]string, 0, len(declared))
	for m := range declared {
		names = append(names, m)
	}
	sort.Strings(names)
	var out []string
	for _, m := range names {
		serving, priced := 0, 0
		for _, e := range endpoints {
			models, ok := scheduling.ModelsKey.Get(e)
			if ok && models != nil {
				if _, serves := models.Lookup(m); !serves {
					continue
				}
			}
			serving++
			if _, ok := LookupPrice(e, m, p.Catalog); ok {
				priced++
			}
		}
		if serving >= 2 && priced < 2 {
			out = append(out, fmt.Sprintf("%s: model %q is served by %d endpoints but only %d are priced: LeastCost cannot tell its replicas apart by price (unpriced ones rank last); declare pricing on each, or add the model to the catalog for endpoints that declare no entry for it",
				Type, m, serving, priced))
		}
	}
	return out
}

// Catalog returns the instance's catalog (read-only).
func (p *Picker) Catalog() map[string]scheduling.Price { return p.catalog }

// Registration registers the least-cost-picker.
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
