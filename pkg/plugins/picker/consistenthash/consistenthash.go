// Package consistenthash provides the consistent-hash-picker, the
// ConsistentHash selection strategy (Continuum Router, C-14): the resolved
// model name is hashed onto a ring of the candidates, so requests for the
// same model over the same candidate set always go to the same endpoint.
// This is model-level affinity, not session affinity; a few popular models
// can load their endpoints unevenly.
//
// Each candidate has virtualNodes points on the ring (150 by default); a
// request's endpoint owns the first point at or after the hash of its
// model, and fallbacks are the next distinct owners clockwise. Adding or
// removing a candidate moves only the models whose points it takes or
// leaves: about 1/N of them. Hashes are xxhash of the endpoint's key and
// of the model name, the same in every process, so EPP replicas agree.
//
// The ring is built over a superset of the candidates (every endpoint
// seen as a candidate recently: the pool) and cached; a request walks it
// skipping the endpoints that are not its candidates, each candidate
// visited once (see internal/hashring). The result is exactly that of a
// ring of the candidates alone, and filters that narrow the candidates
// per request cost no build: the ring is rebuilt only when an endpoint
// that is not on it becomes a candidate. The request path takes no lock
// then.
package consistenthash

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/hashring"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "consistent-hash-picker"

// Bounds of virtualNodes. The ring holds members × virtualNodes points
// of 16 bytes: 1000 endpoints at the default make 2.4 MB.
const (
	DefaultVirtualNodes = 150
	MaxVirtualNodes     = 1000
)

// Params configures a consistent-hash-picker.
type Params struct {
	pick.Params
	// VirtualNodes is the number of points each candidate has on the ring:
	// more points spread models more evenly and cost memory and build
	// time. 1..1000; default 150.
	VirtualNodes int `json:"virtualNodes"`
}

// DefaultParams returns the default parameters: one endpoint, 150 virtual
// nodes.
func DefaultParams() Params {
	return Params{Params: pick.DefaultParams(), VirtualNodes: DefaultVirtualNodes}
}

// Validate reports every invalid parameter, each prefixed by its field
// path.
func (p *Params) Validate() error {
	errs := []error{p.Params.Validate()}
	if p.VirtualNodes < 1 || p.VirtualNodes > MaxVirtualNodes {
		errs = append(errs, fmt.Errorf("virtualNodes: must be 1..%d, got %d", MaxVirtualNodes, p.VirtualNodes))
	}
	return errors.Join(errs...)
}

// Picker is a consistent-hash-picker instance. It is safe for concurrent
// use.
type Picker struct {
	pick.Base
	vnodes int

	rings *hashring.Cache
}

// New returns a consistent-hash-picker.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	base, err := pick.NewBase(Type, name, p.Params, h)
	if err != nil {
		return nil, err
	}
	return &Picker{Base: base, vnodes: p.VirtualNodes, rings: hashring.NewCache(p.VirtualNodes, nil, nil)}, nil
}

var viewPool = sync.Pool{New: func() any { return new(hashring.View) }}

// ModelKey is what the picker hashes: the resolved model name (the model
// the request is sent to after rewrites), else the model the client named.
func ModelKey(req *scheduling.Request) string {
	if req == nil {
		return ""
	}
	if req.TargetModel != "" {
		return req.TargetModel
	}
	return req.Model
}

// Pick implements scheduling.Picker: the owner of the first ring point
// at or after the model's hash among the candidates, then the next
// distinct candidates clockwise. The same model over the same candidate
// set (in any order) gets the same endpoints. Pick does not modify scored.
func (p *Picker) Pick(_ context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	switch len(scored) {
	case 0:
		return &scheduling.ProfileResult{}
	case 1:
		return pick.Single(scored[0].Endpoint)
	}
	v := viewPool.Get().(*hashring.View)
	defer func() { v.Release(); viewPool.Put(v) }()
	p.rings.View(scored, v)
	v.Start(xxhash.Sum64String(ModelKey(req)))
	if p.Max == 1 {
		return pick.Single(scored[v.Next()].Endpoint)
	}
	k := min(p.Max, v.Candidates())
	targets := make([]*scheduling.Endpoint, 0, k)
	for len(targets) < k {
		i := v.Next()
		if i < 0 {
			break
		}
		targets = append(targets, scored[i].Endpoint)
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// Close implements scheduling.Closer: it drops the cached ring; requests
// still running on the old configuration build uncached ones.
func (p *Picker) Close(scheduling.CloseInfo) { p.rings.Close() }

// Registration registers the consistent-hash-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker = (*Picker)(nil)
	_ scheduling.Closer = (*Picker)(nil)
)
