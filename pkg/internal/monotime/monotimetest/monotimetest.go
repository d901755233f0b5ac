// Package monotimetest makes time readings whose wall clock was stepped
// while their monotonic reading was not, for tests that prove ages come
// from the monotonic clock. Tests only.
package monotimetest

import (
	"testing"
	"time"
	"unsafe"
)

// WallStepped returns t with its wall clock moved by step and its
// monotonic reading kept: what time.Now returns after the system clock
// was stepped. The runtime offers no API for it, so it edits the wall
// seconds field of a time.Time with a monotonic reading (wall: flag bit,
// 33 bits of seconds since 1885, 30 bits of nanoseconds; ext: the
// monotonic reading); the result is checked (same monotonic instant:
// out.Sub(tm) == 0; wall clocks step apart: out.Round(0).Sub(tm.Round(0))
// == step), so a layout change fails the test instead of passing it.
func WallStepped(t testing.TB, tm time.Time, step time.Duration) time.Time {
	t.Helper()
	type layout struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	if unsafe.Sizeof(tm) != unsafe.Sizeof(layout{}) {
		t.Fatal("time.Time layout changed")
	}
	l := *(*layout)(unsafe.Pointer(&tm))
	const hasMonotonic = 1 << 63
	if l.wall&hasMonotonic == 0 || step%time.Second != 0 {
		t.Fatal("want a reading with a monotonic part and a whole-second step")
	}
	l.wall = uint64(int64(l.wall) + int64(step/time.Second)<<30)
	out := *(*time.Time)(unsafe.Pointer(&l))
	if !out.Round(0).Equal(tm.Round(0).Add(step)) || out.String() == tm.Round(0).Add(step).String() ||
		out.Sub(tm) != 0 || out.Round(0).Sub(tm.Round(0)) != step {
		t.Fatalf("wall-clock step not applied as expected: %v from %v", out, tm)
	}
	return out
}
