package matrix

import (
	"math"
	"time"
)

// Step is what one open-loop step of the rate search saw.
type Step struct {
	Rate   float64 // offered arrivals per second
	Served float64 // exchanges completed per second
	// Arrivals is how many exchanges the schedule produced in the
	// measured part (sent or dropped); Done how many were answered.
	Arrivals, Done  int64
	Errors, Dropped int64
	P99             time.Duration
}

// Search finds the highest open-loop rate an EPP sustains: p99 within
// the bound, no error, nothing dropped and at least 95 % of the arrivals
// answered. It doubles from First until a step fails (up to Max); when
// First already fails it halves, down to a sixteenth of it, until one
// passes; then it bisects the bracket twice.
//
// A step that fails by its p99 alone, by less than Retry times the bound,
// is run once more and passes if the second run does: on a 2-core machine
// one scheduler stall fails a step's p99 whatever the rate, and without
// the second run the answer is that stall's timing rather than the
// EPP's ceiling. Every EPP gets the same rule.
type Search struct {
	First, Max float64
	P99        time.Duration
	Retry      float64
}

// ok says whether s passes. Arrivals, not the nominal rate, are the
// measure of "served": a Poisson schedule's count over a few seconds is
// off the rate by several percent at low rates.
func (c Search) ok(s Step) bool {
	return s.Errors == 0 && s.Dropped == 0 && s.P99 <= c.P99 && float64(s.Done) >= 0.95*float64(s.Arrivals)
}

// nearMiss says whether s failed by its p99 alone, by less than Retry×.
func (c Search) nearMiss(s Step) bool {
	return s.Errors == 0 && s.Dropped == 0 && float64(s.Done) >= 0.95*float64(s.Arrivals) &&
		s.P99 > c.P99 && float64(s.P99) < c.Retry*float64(c.P99)
}

// Run searches with step running one step at a rate. It returns the
// highest passing rate (0 when none did) and the highest throughput seen.
func (c Search) Run(step func(rate float64) Step) (maxRate, plateau float64) {
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
