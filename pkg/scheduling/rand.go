package scheduling

import (
	"math/rand/v2"
	"sync/atomic"
)

// splitMix is a random source safe for concurrent use without a lock: each
// draw advances a shared counter atomically and mixes it with SplitMix64.
// Given the same seed and the same order of draws it yields the same
// sequence, so single-goroutine tests are deterministic.
type splitMix struct{ state atomic.Uint64 }

func (s *splitMix) Uint64() uint64 {
	z := s.state.Add(0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// NewRand returns a *rand.Rand that is safe for concurrent use and
// deterministic for a given seed.
func NewRand(seed uint64) *rand.Rand {
	s := &splitMix{}
	s.state.Store(seed)
	return rand.New(s)
}
