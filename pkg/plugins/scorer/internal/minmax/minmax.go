// Package minmax holds the min-max normalisation shared by the in-tree
// scorers that prefer endpoints with a lower count (queue-scorer,
// running-requests-size-scorer), as GIE v1.5 computes it.
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
func Score(endpoints []*scheduling.Endpoint, scores []float64, metric func(*scheduling.Endpoint) int) {
	lo, hi := math.MaxInt, math.MinInt
	for i, e := range endpoints {
		x := metric(e)
		lo = min(lo, x)
		hi = max(hi, x)
		scores[i] = float64(x)
	}
	if hi == lo {
		for i := range endpoints {
			scores[i] = 1
		}
		return
	}
	// float64(hi) - scores[i] is float64(hi - x) exactly for counts below
	// 2^53, i.e. any real metric.
	top, span := float64(hi), float64(hi-lo)
	for i := range endpoints {
		scores[i] = (top - scores[i]) / span
	}
}
