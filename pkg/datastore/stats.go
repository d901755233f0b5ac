package datastore

import (
	"math"
	"sync/atomic"
	"time"
)

// EWMAAlpha is the weight of a new sample in the latency moving averages
// of EndpointStats: avg = avg + EWMAAlpha × (sample − avg). With 0.2 a
// sample's influence halves after about three newer samples.
const EWMAAlpha = 0.2

// EndpointStats holds one endpoint's live request counters. All methods are
// lock-free and safe for concurrent use from the request path. The store
// keeps one EndpointStats per endpoint for the endpoint's life (as long as
// its name, namespace, address and port stay the same), across metric
// updates and label changes; a request may keep its pointer and call
// Finish after the endpoint was removed.
type EndpointStats struct {
	inFlight       atomic.Int64
	inFlightTokens atomic.Int64
	served         atomic.Uint64
	errors         atomic.Uint64
	// ttft and e2e hold float64 nanoseconds as bits; 0 means no sample yet.
	ttft atomic.Uint64
	e2e  atomic.Uint64
}

// Start records a request forwarded to the endpoint with an estimated
// token count: in-flight requests +1, in-flight tokens +tokens.
func (st *EndpointStats) Start(tokens int64) {
	st.inFlight.Add(1)
	st.inFlightTokens.Add(tokens)
}

// FirstToken records a request's time to first token in the TTFT moving
// average. Durations ≤ 0 are ignored.
func (st *EndpointStats) FirstToken(ttft time.Duration) {
	updateEWMA(&st.ttft, ttft)
}

// Finish records the end of a request that Start recorded, with the same
// token count: in-flight requests −1, in-flight tokens −tokens, and served
// +1 when ok or errors +1 otherwise. The end-to-end latency enters the E2E
// moving average only when ok (a failed request's latency says little about
// the endpoint's speed); durations ≤ 0 are ignored.
func (st *EndpointStats) Finish(tokens int64, e2e time.Duration, ok bool) {
	st.inFlight.Add(-1)
	st.inFlightTokens.Add(-tokens)
	if !ok {
		st.errors.Add(1)
		return
	}
	st.served.Add(1)
	updateEWMA(&st.e2e, e2e)
}

// InFlight returns the number of requests started and not finished.
func (st *EndpointStats) InFlight() int64 { return st.inFlight.Load() }

// InFlightTokens returns the tokens of the requests in flight.
func (st *EndpointStats) InFlightTokens() int64 { return st.inFlightTokens.Load() }

// Served returns the number of requests finished successfully.
func (st *EndpointStats) Served() uint64 { return st.served.Load() }

// Errors returns the number of requests finished with an error.
func (st *EndpointStats) Errors() uint64 { return st.errors.Load() }

// TTFT returns the moving average of the time to first token, 0 before the
// first sample.
func (st *EndpointStats) TTFT() time.Duration { return loadEWMA(&st.ttft) }

// E2E returns the moving average of the end-to-end latency of successful
// requests, 0 before the first sample.
func (st *EndpointStats) E2E() time.Duration { return loadEWMA(&st.e2e) }

func loadEWMA(a *atomic.Uint64) time.Duration {
	return time.Duration(math.Float64frombits(a.Load()))
}

// updateEWMA folds one sample into an average stored as float64 bits, with
// a compare-and-swap loop. The first sample sets the average.
func updateEWMA(a *atomic.Uint64, sample time.Duration) {
	if sample <= 0 {
		return
	}
	x := float64(sample)
	for {
		old := a.Load()
		next := x
		if old != 0 {
			avg := math.Float64frombits(old)
			next = avg + EWMAAlpha*(x-avg)
		}
		if a.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}
