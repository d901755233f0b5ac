// Package servedmodel implements the served-model-filter: where endpoints
// declare the models they serve (scheduling.ModelsKey: the endpoints
// file's models, the switchyard.ai/models pod annotation), it keeps the
// candidates that serve the request's model or an alias of it, and
// rewrites the request's target model to the served name when an alias
// matched. An endpoint that declares nothing serves every model, as in
// GIE, so a pool where none declares is left as it is.
//
// A request for a model no candidate serves cannot be answered by a
// filter (a filter can only narrow): the plugin is also a
// scheduling.Admitter, which the framework runs before the profiles. It
// judges the model against the whole pool (every endpoint, routable or
// not, which it reads as a scheduling.Runner through
// scheduling.PoolWatcher): a model no endpoint of the pool serves is
// refused with 404 and the reason model_not_found; a model the pool
// serves, but none of the candidates (its endpoints are unhealthy, their
// breakers open, their metrics stale), with 503 and the reason
// model_unavailable.
package servedmodel

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/internal/candcache"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "served-model-filter"

// ReasonModelNotFound is the refusal reason of a model no endpoint of
// the pool serves (HTTP 404).
const ReasonModelNotFound = "model_not_found"

// ReasonModelUnavailable is the refusal reason of a model that endpoints
// of the pool serve, none of them a candidate now (HTTP 503).
const ReasonModelUnavailable = "model_unavailable"

// maxListedModels bounds the served models a 404 message lists.
const maxListedModels = 10

// Params are the plugin's parameters.
type Params struct {
	// RefuseUnknownModels refuses a request for a model no candidate
	// serves with 404 model_not_found (default true). With false such a
	// request is admitted and the filter leaves no candidate, so the
	// profile fails (503 none_schedulable).
	RefuseUnknownModels bool `json:"refuseUnknownModels"`
}

// DefaultParams returns the defaults.
func DefaultParams() Params { return Params{RefuseUnknownModels: true} }

// Filter is a served-model-filter instance. It is safe for concurrent
// use.
type Filter struct {
	// PoolWatcher makes the filter a scheduling.Runner that reads the
	// whole pool for Admit.
	scheduling.PoolWatcher

	typedName scheduling.TypedName
	refuse    bool
	cache     candcache.Cache[*index]
	pool      candcache.Cache[*index] // over the whole pool (Admit)
}

// New returns a served-model-filter.
func New(name string, p Params, _ scheduling.Handle) (*Filter, error) {
	if name == "" {
		name = Type
	}
	return &Filter{typedName: scheduling.TypedName{Type: Type, Name: name}, refuse: p.RefuseUnknownModels}, nil
}

// TypedName implements scheduling.Plugin.
func (f *Filter) TypedName() scheduling.TypedName { return f.typedName }

// index is what the filter knows of one candidate list.
type index struct {
	declared bool
	// open are the positions of the endpoints that declare nothing (they
	// serve every model).
	open []int
	// byName maps every declared name and alias to the endpoints serving
	// it, in candidate order.
	byName map[string][]match
	// served are the declared model names, sorted.
	served []string
	// resolved memoizes resolve for declared names (name → *resolution).
	resolved sync.Map
}

// resolution is what resolve found for one name.
type resolution struct {
	pos    []int
	served string
}

type match struct {
	pos    int
	served string // the served name the request is rewritten to
	exact  bool   // the request named the served name itself
}

func build(eps []*scheduling.Endpoint) *index {
	idx := &index{}
	seen := map[string]struct{}{}
	for i, e := range eps {
		m, ok := scheduling.ModelsKey.Get(e)
		if !ok || m == nil || len(m.Entries) == 0 {
			idx.open = append(idx.open, i)
			continue
		}
		if idx.byName == nil {
			idx.byName = map[string][]match{}
		}
		idx.declared = true
		for _, me := range m.Entries {
			idx.byName[me.Name] = append(idx.byName[me.Name], match{pos: i, served: me.Name, exact: true})
			for _, a := range me.Aliases {
				idx.byName[a] = append(idx.byName[a], match{pos: i, served: me.Name})
			}
			if _, dup := seen[me.Name]; !dup {
				seen[me.Name] = struct{}{}
				idx.served = append(idx.served, me.Name)
			}
		}
	}
	slices.Sort(idx.served)
	return idx
}

// requested is the model a request is sent to.
func requested(req *scheduling.Request) string {
	if req.TargetModel != "" {
		return req.TargetModel
	}
	return req.Model
}

// resolve returns the positions of the candidates that serve model (in
// candidate order) and the served name to send it as. An exact match
// wins over aliases; among aliases naming different served models, the
// one served by the most candidates wins (then the smallest name), so
// every kept endpoint serves the same name.
func (idx *index) resolve(model string) (pos []int, served string) {
	ms := idx.byName[model]
	if len(ms) == 0 {
		return idx.open, model // only the endpoints that serve every model
	}
	if v, ok := idx.resolved.Load(model); ok {
		r := v.(*resolution)
		return r.pos, r.served
	}
	served = model
	exact := slices.ContainsFunc(ms, func(m match) bool { return m.exact })
	if !exact {
		count := map[string]int{}
		for _, m := range ms {
			count[m.served]++
		}
		best := ""
		for name, n := range count {
			if best == "" || n > count[best] || n == count[best] && name < best {
				best = name
			}
		}
		served = best
	}
	// Merge the matches and the open endpoints, both in candidate order.
	pos = make([]int, 0, len(ms)+len(idx.open))
	open := idx.open
	for _, m := range ms {
		if m.served != served || m.exact != exact {
			continue
		}
		for len(open) > 0 && open[0] < m.pos {
			pos = append(pos, open[0])
			open = open[1:]
		}
		pos = append(pos, m.pos)
	}
	pos = append(pos, open...)
	idx.resolved.Store(model, &resolution{pos: pos, served: served})
	return pos, served
}

// Filter implements scheduling.Filter: where a candidate declares models,
// it keeps those serving the request's model (or an alias of it) and the
// ones declaring nothing, and sets req.TargetModel to the served name
// when an alias matched (the body sent upstream then names it). Where
// none declares, it returns endpoints unchanged.
func (f *Filter) Filter(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	idx := f.cache.Get(endpoints, build)
	if !idx.declared || req == nil {
		return endpoints
	}
	pos, served := idx.resolve(requested(req))
	if len(pos) == len(endpoints) {
		if served != requested(req) {
			req.TargetModel = served
		}
		return endpoints
	}
	out := make([]*scheduling.Endpoint, len(pos))
	for i, p := range pos {
		out[i] = endpoints[p]
	}
	if served != requested(req) && len(out) > 0 {
		req.TargetModel = served
	}
	return out
}

// Admit implements scheduling.Admitter: where a candidate declares
// models, a request for a model that no candidate serves (by name or
// alias), while every candidate declares its models, is refused (unless
// refuseUnknownModels is false). The pool decides how: if an endpoint of
// the pool that is not a candidate serves the model, or declares nothing
// (it serves every model), 503 model_unavailable; if none does, 404
// model_not_found, listing the models the pool serves. Before the host
// runs the plugin (scheduling.PoolWatcher) the candidates stand for the
// pool.
func (f *Filter) Admit(_ context.Context, req *scheduling.Request, candidates []*scheduling.Endpoint) *scheduling.Refusal {
	if !f.refuse || req == nil {
		return nil
	}
	idx := f.cache.Get(candidates, build)
	model := requested(req)
	if !idx.declared || len(idx.open) > 0 || len(idx.byName[model]) > 0 {
		return nil
	}
	if pool, ok := f.Pool(); ok && len(pool) > 0 {
		pidx := f.pool.Get(pool, build)
		if n := len(pidx.open) + countEndpoints(pidx.byName[model]); n > 0 {
			return &scheduling.Refusal{
				StatusCode: http.StatusServiceUnavailable,
				Reason:     ReasonModelUnavailable,
				Message: fmt.Sprintf("The model %q is served by %d endpoints of the pool, none of which can take requests now "+
					"(health check failed, circuit breaker open, metrics stale, or outside the request's subset)", clip(model), n),
			}
		}
		idx = pidx
	}
	listed := idx.served[:min(len(idx.served), maxListedModels)]
	more := ""
	if n := len(idx.served) - len(listed); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return &scheduling.Refusal{
		StatusCode: http.StatusNotFound,
		Reason:     ReasonModelNotFound,
		Message:    fmt.Sprintf("The model %q does not exist or is not served by this pool; served models: %s%s", clip(model), strings.Join(listed, ", "), more),
	}
}

// countEndpoints counts the distinct endpoints of ms (an endpoint may
// match by name and by aliases).
func countEndpoints(ms []match) int {
	n, last := 0, -1
	for _, m := range ms {
		if m.pos != last { // build appends one endpoint's matches together
			n++
			last = m.pos
		}
	}
	return n
}

// clip shortens a client-supplied name quoted in a message.
func clip(s string) string {
	if len(s) > 256 {
		return s[:256] + "…"
	}
	return s
}

// Registration registers the served-model-filter type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Filter   = (*Filter)(nil)
	_ scheduling.Admitter = (*Filter)(nil)
	_ scheduling.Runner   = (*Filter)(nil)
)
