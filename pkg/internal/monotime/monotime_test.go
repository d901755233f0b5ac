package monotime_test

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/internal/monotime"
	"github.com/switchyard-ai/switchyard/pkg/internal/monotime/monotimetest"
)

// TestNanosUsesTheMonotonicReading: Nanos of real readings follows the
// monotonic clock. A reading stripped of its monotonic part (Round(0))
// whose wall clock then steps back an hour, as after an NTP correction,
// would make an age an hour longer; Nanos of the real reading is
// unaffected by where the wall clock stands, because t.Sub(epoch) is
// computed from the monotonic readings alone.
func TestNanosUsesTheMonotonicReading(t *testing.T) {
	at := time.Now()
	later := at.Add(2 * time.Second) // keeps the monotonic reading
	if got := monotime.Since(monotime.Nanos(at), later); got != 2*time.Second {
		t.Fatalf("Since = %v, want 2s", got)
	}
	// The same instant as a wall-clock-only time, with the wall clock
	// stepped back an hour: its Nanos moves by the step, the monotonic
	// reading's does not.
	stepped := later.Round(0).Add(-time.Hour)
	// Exactly: the wall-clock-only time is measured from the epoch's wall
	// reading, the real reading from the epoch's monotonic one (no
	// tolerance, which a slewing clock could exceed).
	want := stepped.Sub(monotime.Epoch().Round(0)) - at.Sub(monotime.Epoch())
	if got := monotime.Since(monotime.Nanos(at), stepped); got != want {
		t.Fatalf("wall-clock only: Since = %v, want %v", got, want)
	}
	// The step shows in full: against the same instant unstepped, the
	// wall-clock-only age is exactly an hour shorter.
	if got := monotime.Nanos(stepped) - monotime.Nanos(later.Round(0)); time.Duration(got) != -time.Hour {
		t.Fatalf("wall-clock only: the step moved Nanos by %v, want -1h", time.Duration(got))
	}
	// A real reading whose wall clock was stepped back an hour keeps its
	// monotonic reading, and Nanos ignores the step.
	jumped := monotimetest.WallStepped(t, later, -time.Hour)
	if got := monotime.Since(monotime.Nanos(at), jumped); got != 2*time.Second {
		t.Fatalf("after a wall-clock step: Since = %v, want 2s (monotonic)", got)
	}
	if monotime.Nanos(monotime.Epoch()) != 0 {
		t.Fatalf("monotime.Nanos(monotime.Epoch()) = %d", monotime.Nanos(monotime.Epoch()))
	}
}

// TestNanosFakeClock: times without a monotonic reading (unit tests'
// fake clocks) stay consistent with each other.
func TestNanosFakeClock(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	if got := monotime.Since(monotime.Nanos(t0), t0.Add(11*time.Second)); got != 11*time.Second {
		t.Fatalf("Since = %v, want 11s", got)
	}
}
