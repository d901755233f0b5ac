// Package leastlatency provides the least-latency-picker, the LeastLatency
// selection strategy (Continuum Router, C-12): the candidate with the
// lowest observed mean response time wins.
//
// The latency is the EPP's own measurement (scheduling.LoadKey's E2E: a
// moving average of the end-to-end time of the endpoint's successful
// requests, streamed or not, kept by the datastore, so it survives
// reloads). The seed's "mean response time" is end to end; time to first
// token exists for streamed requests only, and ranking by it would compare
// unlike numbers across a mixed workload, so it is not used.
//
// Candidates without a measurement are tried first, in round-robin order
// among themselves, until they have one: an endpoint that joined the pool
// gets requests before the measured ones. While such an endpoint's first
// request is still running it waits for that measurement (it ranks after
// the measured candidates), so a new endpoint gets a probe, not a flood.
// A candidate whose completed requests all failed has no latency either;
// it ranks last. The strategy steers and never removes: a slow endpoint
// stays a candidate (a fallback, and the pick again once the others are
// slower), as the seed says; ejecting slow endpoints is the circuit
// breaker's job (latencyAsFailure).
package leastlatency

import (
	"context"
	"slices"
	"sync"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "least-latency-picker"

// Params configures a least-latency-picker: up to MaxNumOfEndpoints
// distinct endpoints are returned in the picker's order (unmeasured first,
// then by ascending latency).
type Params = pick.Params

// DefaultParams returns the default parameters: one endpoint.
func DefaultParams() Params { return pick.DefaultParams() }

// Picker is a least-latency-picker instance. It is safe for concurrent
// use.
type Picker struct {
	pick.Base
	turn pick.Rotation
}

// New returns a least-latency-picker.
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	base, err := pick.NewBase(Type, name, p, h)
	if err != nil {
		return nil, err
	}
	return &Picker{Base: base}, nil
}

// The ranking keys of the candidates without a latency; measured ones rank
// by their latency in nanoseconds (>= 1), between unmeasured and probing.
const (
	// keyUnmeasured: no measurement and nothing in flight: tried first.
	keyUnmeasured = 0
	// keyProbing: no measurement yet, a request in flight.
	keyProbing = pick.Taken - 2
	// keyFailed: completed requests, none successful.
	keyFailed = pick.Taken - 1
)

// key ranks one candidate.
func key(e *scheduling.Endpoint) uint64 {
	l, ok := scheduling.LoadKey.Get(e)
	if !ok || l == nil {
		return keyUnmeasured
	}
	if d := l.E2E(); d > 0 {
		return min(uint64(d), keyProbing-1)
	}
	switch {
	case l.InFlight() > 0:
		return keyProbing
	case l.Errors() > 0:
		return keyFailed
	}
	return keyUnmeasured
}

var keyPool = sync.Pool{New: func() any { return new([]uint64) }}

// Pick implements scheduling.Picker. Candidates without a measurement and
// without a request in flight come first, taking turns in input order;
// then the measured ones from the lowest latency (equal latencies taking
// turns); then those whose first request is still running; then those
// whose requests all failed. The primary is the first of that order,
// fallbacks the next ones. Pick does not modify scored.
func (p *Picker) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return p.PickInProfile(ctx, req, scored, scheduling.PickInfo{})
}

// PickInProfile implements scheduling.ProfilePicker: Pick, but a call that
// only orders fallbacks (info.FallbacksOnly) does not advance the rotation among unmeasured or equal candidates.
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
		keys[i] = key(scored[i].Endpoint)
	}
	return pick.AscendingRotated(scored, keys, p.turn.Turn(info), p.Max)
}

// Registration registers the least-latency-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Picker        = (*Picker)(nil)
	_ scheduling.ProfilePicker = (*Picker)(nil)
)
