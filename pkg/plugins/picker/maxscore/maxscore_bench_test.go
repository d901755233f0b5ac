package maxscore

import (
	"fmt"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func benchScored(n int) []scheduling.ScoredEndpoint {
	rng := rand.New(rand.NewPCG(1, 2))
	scores := make([]float64, n)
	for i := range scores {
		// Few distinct values, so there are ties to break.
		scores[i] = float64(rng.IntN(10)) / 10
	}
	return schedulingtest.Scored(scores...)
}

func benchmarkPick(b *testing.B, max int) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, max)
			scored := benchScored(n)
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
