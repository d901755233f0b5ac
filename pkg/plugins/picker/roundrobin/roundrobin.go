// Package roundrobin provides the round-robin-picker, the RoundRobin
// selection strategy (Continuum Router, C-10): an atomic counter walks the
// candidates in their given order, one step per request. Scores, weights
// and latency are ignored.
//
// The candidates arrive in the order the profile passes them (the
// snapshot's name order, narrowed by the filters), so with a stable set
// each endpoint gets every n-th request. The counter belongs to the
// instance: a reload that rebuilds the instance starts it again at 0.
package roundrobin

import (
	"context"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "round-robin-picker"

// Params configures a round-robin-picker: MaxNumOfEndpoints endpoints are
// returned, this request's turn first, then the endpoints after it in
// order (wrapping around) as fallbacks.
type Params = pick.Params

// DefaultParams returns the default parameters: one endpoint.
func DefaultParams() Params { return pick.DefaultParams() }

// Picker is a round-robin-picker instance. It is safe for concurrent use.
type Picker struct {
	pick.Base
	turn pick.Rotation
}

// New returns a round-robin-picker.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	base, err := pick.NewBase(Type, name, p, h)
	if err != nil {
		return nil, err
	}
	return &Picker{Base: base}, nil
}

// Pick implements scheduling.Picker: the k-th request (from 0) gets
// scored[k mod n], then the next endpoints in order. Pick does not modify
// scored.
func (p *Picker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.PickInProfile(ctx, req, scored, scheduling.PickInfo{})
}

// PickInProfile implements scheduling.ProfilePicker: Pick, but a call that
// only orders fallbacks (info.FallbacksOnly) does not advance the counter.
func (p *Picker) PickInProfile(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	if len(scored) == 0 {
		return &scheduling.ProfileResult{}
	}
	return pick.Rotated(scored, p.turn.Turn(info), p.Max)
}

// Registration registers the round-robin-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker        = (*Picker)(nil)
	_ scheduling.ProfilePicker = (*Picker)(nil)
)
