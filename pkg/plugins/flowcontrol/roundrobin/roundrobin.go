// Package roundrobin provides the round-robin-fairness-policy: the active
// flows of a priority band (tenants with queued requests) are served in
// turn, one request each, so every tenant gets the same share of dispatches
// however many requests it queues. A flow that becomes active joins the end
// of the turn. A pick costs O(1).
//
// GIE v1.5 walks the flows in the order of their keys, starting after the
// last flow served; serving them in activation order gives the same shares
// without sorting the keys on every pick.
package roundrobin

import (
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "round-robin-fairness-policy"

// Params is empty: the policy takes no parameters.
type Params = scheduling.NoParams

// DefaultParams returns the (empty) parameters.
func DefaultParams() Params { return Params{} }

// Policy is a round-robin-fairness-policy instance. The turn is kept by
// each band, so one instance may serve several bands.
type Policy struct {
	flowcontrol.RoundRobin
	name string
}

// New returns a round-robin-fairness-policy.
func New(name string, _ Params, _ scheduling.Handle) (*Policy, error) {
	return &Policy{name: name}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Policy) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: p.name}
}

// Registration registers the round-robin-fairness-policy.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Plugin          = (*Policy)(nil)
	_ flowcontrol.FairnessPolicy = (*Policy)(nil)
)
