// Package minmax holds the min-max normalisation shared by the in-tree
// scorers that prefer endpoints with a lower count (queue-scorer,
// running-requests-size-scorer), as GIE v1.5 computes it, and the rule
// for endpoints whose metrics were never measured (Measured, also used by
// kv-cache-utilization-scorer).
//
// It is not a plugin and registers nothing. Being internal, only the scorer
// plugins under pkg/plugins/scorer may import it.
package minmax

import (
	"math"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Score writes into scores[i] the min-max normalisation of
// metric(endpoints[i]) over all the endpoints, lower being better:
// (max − x) / (max − min). The lowest value scores 1 and the highest 0;
// when every endpoint has the same value (one endpoint included), all score
// 1. len(scores) must be at least len(endpoints). Score calls metric once
// per endpoint and allocates nothing.
//
// An endpoint whose metrics were never measured (Metrics().UpdateTime is
// zero: an endpoint that is not scraped) has zeros that say nothing; when
// some other endpoint is measured, it scores 0 (never better than the most
// loaded measured one) and the measured ones are normalised among
// themselves. When none is measured, their values are used as they are,
// as GIE does.
func Score(endpoints []*scheduling.Endpoint, scores []float64, metric func(*scheduling.Endpoint) int) {
	measured := Measured(endpoints)
	lo, hi := math.MaxInt, math.MinInt
	for i, e := range endpoints {
		if measured && e.Metrics().UpdateTime.IsZero() {
			scores[i] = math.NaN()
			continue
		}
		x := metric(e)
		lo = min(lo, x)
		hi = max(hi, x)
		scores[i] = float64(x)
	}
	if hi == lo {
		for i := range endpoints {
			if !math.IsNaN(scores[i]) {
				scores[i] = 1
			} else {
				scores[i] = 0
			}
		}
		return
	}
	// float64(hi) - scores[i] is float64(hi - x) exactly for counts below
	// 2^53, i.e. any real metric.
	top, span := float64(hi), float64(hi-lo)
	for i := range endpoints {
		if math.IsNaN(scores[i]) {
			scores[i] = 0
			continue
		}
		scores[i] = (top - scores[i]) / span
	}
}

// Measured reports whether some of the endpoints have measured metrics
// while others do not (their UpdateTime is zero): only then do the
// unmeasured ones need telling apart.
func Measured(endpoints []*scheduling.Endpoint) bool {
	some, zero := false, false
	for _, e := range endpoints {
		if e.Metrics().UpdateTime.IsZero() {
			zero = true
		} else {
			some = true
		}
		if some && zero {
			return true
		}
	}
	return false
}
