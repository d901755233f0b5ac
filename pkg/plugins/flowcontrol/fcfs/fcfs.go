// Package fcfs provides the fcfs-ordering-policy: a flow's requests leave
// in the order they were queued. It is the default ordering policy of
// every priority band, as in GIE v1.5.
package fcfs

import (
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "fcfs-ordering-policy"

// Params is empty: the policy takes no parameters.
type Params = scheduling.NoParams

// DefaultParams returns the (empty) parameters.
func DefaultParams() Params { return Params{} }

// Policy is an fcfs-ordering-policy instance. It is stateless.
type Policy struct {
	flowcontrol.FCFS
	name string
}

// New returns an fcfs-ordering-policy.
func New(name string, _ Params, _ scheduling.Handle) (*Policy, error) {
	return &Policy{name: name}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Policy) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: p.name}
}

// Registration registers the fcfs-ordering-policy.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Plugin          = (*Policy)(nil)
	_ flowcontrol.OrderingPolicy = (*Policy)(nil)
)
