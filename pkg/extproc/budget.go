package extproc

import "sync/atomic"

// budget is the process-wide bound on body bytes that streams hold while
// they wait for more of a body (Options.MaxBufferedBytes). It is shared by
// every stream of a Server and lock-free: acquire is a compare-and-swap
// loop on one atomic counter, release one atomic add.
type budget struct {
	limit int64
	used  atomic.Int64
}

// acquire takes n bytes, or reports false when they do not fit in what is
// left; it never takes part of n, so used never exceeds limit.
func (b *budget) acquire(n int64) bool {
	for {
		u := b.used.Load()
		if n > b.limit-u {
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
