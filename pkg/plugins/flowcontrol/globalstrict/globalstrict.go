// Package globalstrict provides the global-strict-fairness-policy, the
// default fairness policy of every priority band (as in GIE v1.5): the band
// is served as if it were one queue, taking the flow whose head request
// comes first under the band's ordering policy. With fcfs ordering that is
// the band's oldest request, whatever its flow; a tenant that sends more
// gets more. Ties go to the flow served least recently. A pick costs
// O(active flows).
package globalstrict

import (
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "global-strict-fairness-policy"

// Params is empty: the policy takes no parameters.
type Params = scheduling.NoParams

// DefaultParams returns the (empty) parameters.
func DefaultParams() Params { return Params{} }

// Policy is a global-strict-fairness-policy instance. It is stateless.
type Policy struct {
	flowcontrol.GlobalStrict
	name string
}

// New returns a global-strict-fairness-policy.
func New(name string, _ Params, _ scheduling.Handle) (*Policy, error) {
	return &Policy{name: name}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Policy) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: p.name}
}

// Registration registers the global-strict-fairness-policy.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Plugin          = (*Policy)(nil)
	_ flowcontrol.FairnessPolicy = (*Policy)(nil)
)
