// Package edf provides the edf-ordering-policy: earliest deadline first,
// where a request's deadline is its enqueue time plus its effective TTL
// (its own, else flowControl.defaultRequestTTL, shortened by the client's
// deadline). Requests without a TTL come after every request with one, in
// enqueue order; equal deadlines leave in enqueue order.
package edf

import (
	"math"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "edf-ordering-policy"

// Params is empty: the policy takes no parameters.
type Params = scheduling.NoParams

// DefaultParams returns the (empty) parameters.
func DefaultParams() Params { return Params{} }

// Policy is an edf-ordering-policy instance. It is stateless.
type Policy struct{ name string }

// New returns an edf-ordering-policy.
func New(name string, _ Params, _ scheduling.Handle) (*Policy, error) {
	return &Policy{name: name}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Policy) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: p.name}
}

// OrderKey implements flowcontrol.OrderingPolicy: the deadline in Unix
// nanoseconds, math.MaxInt64 without a TTL.
func (p *Policy) OrderKey(it *flowcontrol.Item) int64 {
	ttl := it.EffectiveTTL()
	if ttl <= 0 {
		return math.MaxInt64
	}
	return addSat(it.EnqueueTime().UnixNano(), int64(ttl))
}

// addSat adds b >= 0 to a, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Registration registers the edf-ordering-policy.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Plugin          = (*Policy)(nil)
	_ flowcontrol.OrderingPolicy = (*Policy)(nil)
)
