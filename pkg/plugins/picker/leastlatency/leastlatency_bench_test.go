package leastlatency

import (
	"fmt"
	"testing"
	"time"
)

func benchmarkPick(b *testing.B, max int) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, max)
			eps := make([]ep, n)
			for i := range eps {
				eps[i] = ep{e2e: time.Duration(100+i%50) * time.Millisecond}
			}
			scored, _ := candidates(eps...)
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
