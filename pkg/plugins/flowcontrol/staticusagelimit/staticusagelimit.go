// Package staticusagelimit provides the static-usage-limit-policy, the
// default usage-limit policy (as in GIE v1.5): every priority band may
// dispatch while the pool's saturation is below one threshold, 1.0 by
// default (the saturation detector's "saturated"). A threshold below 1
// keeps headroom; above 1 lets requests through into the model servers'
// own queues.
package staticusagelimit

import (
	"fmt"
	"math"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "static-usage-limit-policy"

// MaxThreshold bounds Params.Threshold.
const MaxThreshold = 100.0

// Params configures the policy.
type Params struct {
	// Threshold is the saturation below which every band dispatches.
	Threshold float64 `json:"threshold"`
}

// DefaultParams returns the defaults: threshold 1.0.
func DefaultParams() Params { return Params{Threshold: 1.0} }

// Validate checks the parameters.
func (p *Params) Validate() error {
	if math.IsNaN(p.Threshold) || p.Threshold <= 0 || p.Threshold > MaxThreshold {
		return fmt.Errorf("threshold: must be in (0, %g], got %g", MaxThreshold, p.Threshold)
	}
	return nil
}

// Policy is a static-usage-limit-policy instance. It is stateless.
type Policy struct {
	flowcontrol.StaticUsageLimit
	name string
}

// New returns a static-usage-limit-policy.
func New(name string, p Params, _ scheduling.Handle) (*Policy, error) {
	return &Policy{StaticUsageLimit: flowcontrol.StaticUsageLimit{Threshold: p.Threshold}, name: name}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Policy) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: p.name}
}

// Registration registers the static-usage-limit-policy.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Plugin            = (*Policy)(nil)
	_ flowcontrol.UsageLimitPolicy = (*Policy)(nil)
)
