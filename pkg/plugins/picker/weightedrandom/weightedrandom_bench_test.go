package weightedrandom

import (
	"fmt"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
	"math/rand/v2"
	"testing"
)

func benchmarkPick(b *testing.B, max int) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			scores := make([]float64, n)
			for i := range scores {
				scores[i] = rng.Float64() * 3 // three scorers of weight 1
			}
			p := newPicker(b, max)
			scored := schedulingtest.Scored(scores...)
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
