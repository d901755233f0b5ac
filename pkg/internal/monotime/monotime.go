package monotime

import "time"

// epoch is the process's time origin; it has a monotonic reading.
var epoch = time.Now()

// Epoch returns the process epoch.
func Epoch() time.Time { return epoch }

// Nanos returns t as nanoseconds since the process epoch: from the
// monotonic readings when t has one (any time.Now reading, and times
// derived from one with Add), else from the wall clock. Compare only
// values of the same kind: two real readings, or two fake-clock times.
func Nanos(t time.Time) int64 { return int64(t.Sub(epoch)) }

// Since returns the duration from the Nanos value at to now's.
func Since(at int64, now time.Time) time.Duration { return time.Duration(Nanos(now) - at) }
