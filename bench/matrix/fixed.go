package matrix

import (
	"cmp"
	"slices"
	"time"
)

// FixedRounds is how many times the fixed-rate run is repeated. On a
// 2-core machine a scheduler stall of a few milliseconds lands in one
// 10-second window's p99 and not in the next, so a single window's p99
// is that stall's timing as much as the EPP's latency; the median of
// three is the EPP's.
const FixedRounds = 3

// Round is one fixed-rate run.
type Round struct {
	P50, P99 time.Duration
	Served   float64 // answered per second
	Answered int64   // routed or refused
	Failed   int64   // errors and drops
	CPU      time.Duration
}

// Fixed is what the rounds of a fixed-rate run add up to.
type Fixed struct {
	// P50 and P99 are the round's with the median p99 (of an even count,
	// the lower middle one): the two come from one window. A round that
	// answered nothing has no latency and ranks above every other; when
	// the median round is such a round, P50 and P99 are 0 (none answered).
	P50, P99 time.Duration
	Served   float64 // mean over the rounds
	Failed   int64   // over all rounds
	// CPUms is the EPP's CPU milliseconds per answered exchange over
	// all rounds (0 when none was answered).
	CPUms float64
}

// Combine sums up rounds (none: the zero Fixed).
func Combine(rounds []Round) Fixed {
	if len(rounds) == 0 {
		return Fixed{}
	}
	byP99 := slices.Clone(rounds)
	slices.SortStableFunc(byP99, func(a, b Round) int {
		// An empty histogram reads 0: a round with no answer is the
		// worst, not the best.
		if (a.Answered == 0) != (b.Answered == 0) {
			return cmp.Compare(b.Answered, a.Answered)
		}
		return cmp.Compare(a.P99, b.P99)
	})
	var f Fixed
	if mid := byP99[(len(byP99)-1)/2]; mid.Answered > 0 {
		f.P50, f.P99 = mid.P50, mid.P99
	}
	var answered int64
	var cpu time.Duration
	for _, r := range rounds {
		f.Served += r.Served
		f.Failed += r.Failed
		answered += r.Answered
		cpu += r.CPU
	}
	f.Served /= float64(len(rounds))
	if answered > 0 {
		f.CPUms = float64(cpu.Microseconds()) / 1000 / float64(answered)
	}
	return f
}
