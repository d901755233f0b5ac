package pick

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestRotation(t *testing.T) {
	var r Rotation
	for want := range uint64(5) {
		if got := r.Next(); got != want {
			t.Fatalf("Next() = %d, want %d", got, want)
		}
	}
	var wg sync.WaitGroup
	seen := make([]bool, 1000)
	var mu sync.Mutex
	for range 10 {
		wg.Go(func() {
			for range 100 {
				n := r.Next() - 5
				mu.Lock()
				seen[n] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if slices.Contains(seen, false) {
		t.Error("concurrent turns are not each given once")
	}
}

func names(t *testing.T, s []string) string { t.Helper(); return strings.Join(s, ",") }

func TestRotated(t *testing.T) {
	tests := []struct {
		n    int
		c    uint64
		k    int
		want string
	}{
		{n: 0, c: 3, k: 1, want: ""},
		{n: 3, c: 0, k: 1, want: "ep-0"},
		{n: 3, c: 1, k: 1, want: "ep-1"},
		{n: 3, c: 5, k: 1, want: "ep-2"},
		{n: 3, c: 6, k: 1, want: "ep-0"},
		{n: 3, c: 2, k: 2, want: "ep-2,ep-0"},
		{n: 3, c: 1, k: 5, want: "ep-1,ep-2,ep-0"},
		{n: 1, c: 7, k: 3, want: "ep-0"},
	}
	for _, tt := range tests {
		got := names(t, schedulingtest.Names(Rotated(scoredOf(make([]float64, tt.n)...), tt.c, tt.k).Targets))
		if got != tt.want {
			t.Errorf("Rotated(n=%d, c=%d, k=%d) = %q, want %q", tt.n, tt.c, tt.k, got, tt.want)
		}
	}
}

func TestAscendingRotated(t *testing.T) {
	tests := []struct {
		name string
		keys []uint64
		c    uint64
		k    int
		want string
	}{
		{name: "empty", keys: nil, c: 0, k: 1, want: ""},
		{name: "lowest", keys: []uint64{3, 1, 2}, c: 0, k: 1, want: "ep-1"},
		{name: "lowest whatever the turn", keys: []uint64{3, 1, 2}, c: 7, k: 1, want: "ep-1"},
		{name: "ties: turn 0 takes the first", keys: []uint64{5, 0, 9, 0, 0}, c: 0, k: 1, want: "ep-1"},
		{name: "ties: turn 1 the second", keys: []uint64{5, 0, 9, 0, 0}, c: 1, k: 1, want: "ep-3"},
		{name: "ties: turn 2 the third", keys: []uint64{5, 0, 9, 0, 0}, c: 2, k: 1, want: "ep-4"},
		{name: "ties: turn 3 wraps", keys: []uint64{5, 0, 9, 0, 0}, c: 3, k: 1, want: "ep-1"},
		{name: "all equal is round robin", keys: []uint64{4, 4, 4}, c: 4, k: 1, want: "ep-1"},
		{name: "ascending order", keys: []uint64{3, 1, 2}, c: 0, k: 3, want: "ep-1,ep-2,ep-0"},
		{name: "ties rotate, then the next level rotates", keys: []uint64{1, 0, 1, 0, 1}, c: 1, k: 5, want: "ep-3,ep-1,ep-2,ep-4,ep-0"},
		{name: "fewer wanted than tied", keys: []uint64{0, 0, 0, 0}, c: 2, k: 3, want: "ep-2,ep-3,ep-0"},
		{name: "more wanted than endpoints", keys: []uint64{2, 1}, c: 0, k: 4, want: "ep-1,ep-0"},
		{name: "largest usable key", keys: []uint64{Taken - 1, 5}, c: 0, k: 2, want: "ep-1,ep-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scored := scoredOf(make([]float64, len(tt.keys))...)
			got := names(t, schedulingtest.Names(AscendingRotated(scored, slices.Clone(tt.keys), tt.c, tt.k).Targets))
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// Over t turns, each of t tied endpoints is first exactly once, wherever
// the ties sit in the list.
func TestAscendingRotatedSharesTiesEvenly(t *testing.T) {
	keys := []uint64{0, 7, 7, 0, 7, 0, 7, 7}
	scored := scoredOf(make([]float64, len(keys))...)
	counts := map[string]int{}
	for c := range uint64(300) {
		counts[AscendingRotated(scored, slices.Clone(keys), c, 1).Targets[0].Name()]++
	}
	if counts["ep-0"] != 100 || counts["ep-3"] != 100 || counts["ep-5"] != 100 || len(counts) != 3 {
		t.Errorf("counts = %v, want 100 each for ep-0, ep-3, ep-5", counts)
	}
}

func TestRotateAllocs(t *testing.T) {
	scored := scoredOf(0, 0, 0, 0)
	keys := []uint64{3, 1, 1, 2}
	if n := testing.AllocsPerRun(100, func() { Rotated(scored, 3, 1) }); n != 1 {
		t.Errorf("Rotated(k=1) allocates %v times, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { AscendingRotated(scored, keys, 3, 1) }); n != 1 {
		t.Errorf("AscendingRotated(k=1) allocates %v times, want 1", n)
	}
}

// A call that only orders fallbacks sees the turn the next pick takes and
// does not advance the rotation.
func TestRotationTurnFallbacksOnly(t *testing.T) {
	var r Rotation
	fb := scheduling.PickInfo{FallbacksOnly: true}
	for want := range uint64(4) {
		if got := r.Turn(fb); got != want {
			t.Fatalf("Turn(fallbacks only) = %d, want %d (the next pick's)", got, want)
		}
		if got := r.Turn(fb); got != want {
			t.Fatalf("Turn(fallbacks only) again = %d, want %d", got, want)
		}
		if got := r.Turn(scheduling.PickInfo{}); got != want {
			t.Fatalf("Turn(pick) = %d, want %d", got, want)
		}
	}
}
