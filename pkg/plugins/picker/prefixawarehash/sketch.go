package prefixawarehash

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Distinct prefix keys are counted with a HyperLogLog sketch over tumbling
// windows: fixed memory (sketchRegisters bytes of registers per window,
// two windows at most alive), lock-free updates, about 3% standard error.
const (
	// sketchPrecision is the number of hash bits that pick a register.
	sketchPrecision = 10
	sketchRegisters = 1 << sketchPrecision
	// CardinalityWindow is the window continuum_prefix_routing_prefix_cardinality
	// reports on.
	CardinalityWindow = time.Minute
)

// sketch is a HyperLogLog of one window. Registers are atomics so that
// concurrent requests update it without a lock.
type sketch struct {
	start int64 // unix nanoseconds
	regs  [sketchRegisters]atomic.Uint32
}

// add records a 64-bit hash (uniform: bytes of the SHA-256 key).
func (s *sketch) add(h uint64) {
	idx := h >> (64 - sketchPrecision)
	rank := uint32(bits.LeadingZeros64(h<<sketchPrecision|1<<(sketchPrecision-1))) + 1
	r := &s.regs[idx]
	for {
		old := r.Load()
		if rank <= old || r.CompareAndSwap(old, rank) {
			return
		}
	}
}

// estimate returns the number of distinct hashes added (HyperLogLog with
// the small-range correction; 64-bit hashes need no large-range one).
func (s *sketch) estimate() float64 {
	const m = float64(sketchRegisters)
	sum, zeros := 0.0, 0
	for i := range s.regs {
		v := s.regs[i].Load()
		sum += math.Ldexp(1, -int(v))
		if v == 0 {
			zeros++
		}
	}
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return math.Round(e)
}

// cardinality counts distinct keys per tumbling window.
type cardinality struct {
	window    int64 // nanoseconds
	cur       atomic.Pointer[sketch]
	last      atomic.Uint64 // math.Float64bits of the last completed window's estimate
	completed atomic.Bool   // a window has completed
	now       func() time.Time
}

func newCardinality(window time.Duration, now func() time.Time) *cardinality {
	c := &cardinality{window: int64(window), now: now}
	c.cur.Store(&sketch{start: now().UnixNano()})
	return c
}

// add records a key hash seen at now.
func (c *cardinality) add(now time.Time, h uint64) {
	s := c.cur.Load()
	if t := now.UnixNano(); t-s.start >= c.window {
		next := &sketch{start: t - (t-s.start)%c.window}
		if c.cur.CompareAndSwap(s, next) {
			est := s.estimate()
			if t-s.start >= 2*c.window {
				est = 0 // the window before this one saw nothing
			}
			c.last.Store(math.Float64bits(est))
			c.completed.Store(true)
			s = next
		} else {
			s = c.cur.Load()
		}
	}
	s.add(h)
}

// value is the gauge's value at now: the estimate of the last completed
// window, or of the current one while none has completed.
func (c *cardinality) value(now time.Time) float64 {
	s := c.cur.Load()
	switch age := now.UnixNano() - s.start; {
	case age >= 2*c.window:
		return 0
	case age >= c.window:
		return s.estimate()
	case !c.completed.Load():
		return s.estimate()
	}
	return math.Float64frombits(c.last.Load())
}
