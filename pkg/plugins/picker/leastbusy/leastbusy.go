// Package leastbusy provides the least-busy-picker, the LeastBusy
// selection strategy (Continuum Router, C-22): the candidate with the
// fewest requests in flight, as the EPP itself counts them, wins.
//
// The counts are the EPP's own accounting (scheduling.LoadKey: requests
// forwarded and not complete, counted where they were served, also when
// the gateway fell back to another endpoint), so the strategy needs no
// engine metrics and works for any backend. Candidates tied at the lowest
// count, all-idle included, take turns by the instance's rotation
// counter; an endpoint never routed to, or without load data, counts as
// idle.
package leastbusy

import (
	"context"
	"slices"
	"sync"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "least-busy-picker"

// Params configures a least-busy-picker: up to MaxNumOfEndpoints distinct
// endpoints are returned, fewest in flight first; equal counts take turns.
type Params = pick.Params

// DefaultParams returns the default parameters: one endpoint.
func DefaultParams() Params { return pick.DefaultParams() }

// Picker is a least-busy-picker instance. It is safe for concurrent use.
type Picker struct {
	pick.Base
	turn pick.Rotation
}

// New returns a least-busy-picker.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	base, err := pick.NewBase(Type, name, p, h)
	if err != nil {
		return nil, err
	}
	return &Picker{Base: base}, nil
}

// InFlight returns the requests the EPP has in flight at e: 0 when e has
// no load data (never routed to, or a host without accounting).
func InFlight(e *scheduling.Endpoint) int64 {
	if l, ok := scheduling.LoadKey.Get(e); ok && l != nil {
		return max(l.InFlight(), 0)
	}
	return 0
}

var keyPool = sync.Pool{New: func() any { return new([]uint64) }}

// Pick implements scheduling.Picker: the endpoint with the fewest requests
// in flight; among equal counts, turn k (from 0) of t tied endpoints goes
// to the (k mod t)-th in input order. Fallbacks follow in ascending count,
// ties rotating the same way. Pick does not modify scored.
func (p *Picker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.PickInProfile(ctx, req, scored, scheduling.PickInfo{})
}

// PickInProfile implements scheduling.ProfilePicker: Pick, but a call that
// only orders fallbacks (info.FallbacksOnly) does not advance the rotation among ties.
func (p *Picker) PickInProfile(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint, info scheduling.PickInfo) *scheduling.ProfileResult {
	n := len(scored)
	if n == 0 {
		return &scheduling.ProfileResult{}
	}
	buf := keyPool.Get().(*[]uint64)
	defer keyPool.Put(buf)
	keys := slices.Grow((*buf)[:0], n)[:n]
	*buf = keys
	for i := range scored {
		keys[i] = uint64(InFlight(scored[i].Endpoint))
	}
	return pick.AscendingRotated(scored, keys, p.turn.Turn(info), p.Max)
}

// Registration registers the least-busy-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker        = (*Picker)(nil)
	_ scheduling.ProfilePicker = (*Picker)(nil)
)
