package pick

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// BenchmarkSelectTop selects the top 3 among scores with few distinct
// values, so there are ties to break, as the max-score-picker sees them.
func BenchmarkSelectTop(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			scores := make([]float64, n)
			for i := range scores {
				scores[i] = float64(rng.IntN(10)) / 10
			}
			template := scoredOf(scores...)
			s := make([]scheduling.ScoredEndpoint, n)
			b.ReportAllocs()
			for b.Loop() {
				copy(s, template)
				SelectTop(rng, s, 3)
			}
		})
	}
}
