package matrix

import (
	"math"
	"time"
)

// Step is what one open-loop step of the rate search saw.
type Step struct {
	Rate   float64 // nominal arrivals per second
	Served float64 // exchanges answered per second of the step's elapsed time
	// Duration is the step's scheduled length; Arrivals how many exchanges
	// its Poisson schedule produced in it (sent or dropped).
	Duration        time.Duration
	Arrivals        int64
	Errors, Dropped int64
	P99             time.Duration
}

// Search finds the highest open-loop rate an EPP sustains: p99 within
// the bound, no error, nothing dropped, and the arrivals answered at 95 %
// of the pace they were scheduled at. It doubles from First until a step fails (up to Max); when
// First already fails it halves, down to a sixteenth of it, until one
// passes; then it bisects the bracket twice.
//
// A step that fails by its p99 alone, by less than Retry times the bound,
// is run once more and passes if the second run does: on a 2-core machine
// one scheduler stall fails a step's p99 whatever the rate, and without
// the second run the answer is that stall's timing rather than the
// EPP's ceiling. The second run replays the same arrival times (the
// schedule's seed is the rate), so only the stall differs. Every EPP gets
// the same rule.
type Search struct {
	First, Max float64
	P99        time.Duration
	Retry      float64
}

// ok says whether s passes.
func (c Search) ok(s Step) bool {
	return c.kept(s) && s.P99 <= c.P99
}

// kept says whether s had no error, dropped nothing and kept pace: its
// answers came at 95 % or more of the pace its arrivals were scheduled at
// (when the load generator or the EPP falls behind, the step stretches
// past its Duration). The pace is the schedule's own, not the nominal
// rate: a Poisson count over a few seconds is off the rate by several
// percent at low rates.
func (c Search) kept(s Step) bool {
	if s.Errors != 0 || s.Dropped != 0 || s.Duration <= 0 {
		return false
	}
	return s.Served >= 0.95*float64(s.Arrivals)/s.Duration.Seconds()
}

// nearMiss says whether s failed by its p99 alone, by less than Retry×.
func (c Search) nearMiss(s Step) bool {
	return c.kept(s) && s.P99 > c.P99 && float64(s.P99) < c.Retry*float64(c.P99)
}

// Run searches with step running one step at a rate. It returns the
// highest passing rate (0 when none did) and the highest throughput seen.
func (c Search) Run(step func(rate float64) Step) (maxRate, plateau float64) {
	if c.First <= 0 || c.Max < c.First {
		return 0, 0
	}
	try := func(rate float64) bool {
		s := step(rate)
		plateau = math.Max(plateau, s.Served)
		if c.ok(s) {
			return true
		}
		if !c.nearMiss(s) {
			return false
		}
		s = step(rate)
		plateau = math.Max(plateau, s.Served)
		return c.ok(s)
	}
	pass, fail := 0.0, 0.0
	for rate := c.First; rate <= c.Max; rate *= 2 {
		if !try(rate) {
			fail = rate
			break
		}
		pass = rate
	}
	for rate := c.First / 2; pass == 0 && rate >= c.First/16; rate /= 2 {
		if try(rate) {
			pass = rate
		} else {
			fail = rate
		}
	}
	for i := 0; i < 2 && fail > 0 && pass > 0; i++ {
		mid := (pass + fail) / 2
		if try(mid) {
			pass = mid
		} else {
			fail = mid
		}
	}
	return pass, plateau
}
