package leastbusy

import (
	"fmt"
	"testing"
)

func benchmarkPick(b *testing.B, max int) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, max)
			counts := make([]int64, n)
			for i := range counts {
				counts[i] = int64(1 + i%5) // a fifth tied at the lowest
			}
			scored, _ := busy(counts...)
			b.ReportAllocs()
			for b.Loop() {
				p.Pick(b.Context(), nil, scored)
			}
		})
	}
}

// BenchmarkPick picks one endpoint (the default).
func BenchmarkPick(b *testing.B) { benchmarkPick(b, 1) }

// BenchmarkPickThree picks a primary and two fallbacks.
func BenchmarkPickThree(b *testing.B) { benchmarkPick(b, 3) }
