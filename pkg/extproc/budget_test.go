package extproc

import "testing"

// The large tier stops at three quarters; the reserve serves small
// holders; nothing ever goes past the limit.
func TestBudgetTiers(t *testing.T) {
	b := newBudget(4 << 20) // large tier: 3 MiB
	for i := range 3 {
		if !b.acquire(1<<20, int64(i)<<20) {
			t.Fatalf("large chunk %d refused below the large tier", i)
		}
	}
	if b.acquire(1<<20, 3<<20) {
		t.Fatal("a large holder went past three quarters")
	}
	if b.acquire(300<<10, 0) {
		t.Fatal("one chunk above smallHold counts as large")
	}
	// Small holders fill the reserve, and not past the limit.
	for i := range 4 {
		if !b.acquire(smallHold, 0) {
			t.Fatalf("small holder %d refused with room in the reserve", i)
		}
	}
	if b.acquire(1, 0) {
		t.Fatal("went past the limit")
	}
	if got := b.inUse(); got != 4<<20 {
		t.Fatalf("inUse = %d, want the whole budget", got)
	}
	b.release(4 << 20)
	if b.inUse() != 0 {
		t.Fatal("release")
	}
}
