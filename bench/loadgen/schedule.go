package loadgen

import (
	"math"
	"math/rand/v2"
	"time"
)

// Schedule yields the arrival times of a Poisson process: independent,
// exponentially distributed gaps with mean 1/rate. The same seed gives
// the same arrivals, so two EPPs can be driven by the same trace.
type Schedule struct {
	rate float64
	rng  *rand.Rand
	at   time.Duration
}

// NewSchedule returns arrivals at rate per second (> 0) from seed.
func NewSchedule(rate float64, seed uint64) *Schedule {
	return &Schedule{rate: rate, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Next returns the offset of the next arrival from the start.
func (s *Schedule) Next() time.Duration {
	gap := s.rng.ExpFloat64() / s.rate
	s.at += time.Duration(math.Round(gap * float64(time.Second)))
	return s.at
}

// Arrivals returns every arrival offset before d.
func Arrivals(rate float64, d time.Duration, seed uint64) []time.Duration {
	s := NewSchedule(rate, seed)
	out := make([]time.Duration, 0, int(rate*d.Seconds()*1.1)+1)
	for {
		at := s.Next()
		if at >= d {
			return out
		}
		out = append(out, at)
	}
}
