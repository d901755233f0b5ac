// Package monotime turns time.Time readings into monotonic nanoseconds
// since a process epoch, for ages and freshness that a wall-clock step
// (NTP, an operator's date, a VM resume) must not change.
//
// A time.Time from time.Now carries a monotonic clock reading beside the
// wall clock; t.Sub(u) uses the monotonic readings when both have one.
// Nanos(t) is t.Sub(epoch) for an epoch read with time.Now when the
// process starts, so the difference of two Nanos values of real readings
// is a monotonic duration, while a fake clock's times (time.Date, without
// a monotonic reading) fall back to the wall clock and stay consistent
// with each other. Any package may import it; it imports only time.
package monotime
