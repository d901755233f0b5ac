package extproc

import "sync/atomic"

// smallHold is the most a stream may hold and still count as small: a
// normal request's body in flight (Envoy hands bodies over in chunks of
// tens of kilobytes), not a large upload.
const smallHold = 256 << 10

// budget is the process-wide bound on body bytes that streams hold while
// they wait for more of a body (Options.MaxBufferedBytes). It is shared by
// every stream of a Server and lock-free: acquire is a compare-and-swap
// loop on one atomic counter, release one atomic add.
//
// It has two tiers. A stream that would hold more than smallHold may only
// fill the budget up to three quarters; the last quarter is kept for
// streams that hold little. Normal requests hold a few kilobytes for
// milliseconds, so a flood of large stalled bodies (the way a client
// makes a picker hold memory) fills the large tier and is refused there,
// while normal requests keep being served from the reserve.
type budget struct {
	limit int64
	large int64 // limit for streams holding more than smallHold
	used  atomic.Int64
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, large: limit - limit/4}
}

// acquire takes n more bytes for a stream that holds held bytes already,
// or reports false when they do not fit in what is left of its tier; it
// never takes part of n, so used never exceeds limit.
func (b *budget) acquire(n, held int64) bool {
	limit := b.limit
	if held+n > smallHold {
		limit = b.large
	}
	for {
		u := b.used.Load()
		if n > limit-u {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// release gives back n bytes taken by acquire.
func (b *budget) release(n int64) {
	if n != 0 {
		b.used.Add(-n)
	}
}

// inUse returns the bytes currently taken.
func (b *budget) inUse() int64 { return b.used.Load() }
