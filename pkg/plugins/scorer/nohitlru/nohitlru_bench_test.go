package nohitlru

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// warmedScorer returns a scorer whose LRU has seen a cold request on every
// other endpoint, so scoring ranks both never-used and used endpoints.
func warmedScorer(b *testing.B, eps []*scheduling.Endpoint) *Scorer {
	s := newScorer(b, "")
	for i := 0; i < len(eps); i += 2 {
		schedule(s, request(nil), eps, eps[i])
	}
	return s
}

// BenchmarkScoreCold ranks the candidates of a request without a hit.
func BenchmarkScoreCold(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, nil)
			s := warmedScorer(b, eps)
			req := request(scheduling.PrefixHitMap{})
			scores := make([]float64, n)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				s.Score(ctx, req, eps, scores)
			}
		})
	}
}

// BenchmarkScoreWarm is a request with a hit on one candidate.
func BenchmarkScoreWarm(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, nil)
			s := warmedScorer(b, eps)
			req := request(scheduling.PrefixHitMap{eps[n/2].Key(): 4})
			scores := make([]float64, n)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				s.Score(ctx, req, eps, scores)
			}
		})
	}
}

// BenchmarkScorePreRequest is a cold request end to end: score, then record
// the target.
func BenchmarkScorePreRequest(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, nil)
			s := warmedScorer(b, eps)
			req := request(scheduling.PrefixHitMap{})
			scores := make([]float64, n)
			results := make([]*scheduling.Result, n)
			for i, e := range eps {
				results[i] = resultFor(e)
			}
			ctx := b.Context()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				s.Score(ctx, req, eps, scores)
				s.PreRequest(ctx, req, results[i%n])
				i++
			}
		})
	}
}

// BenchmarkScorePreRequestEvicting is a cold request end to end in a pool
// twice as large as lruSize: most targets were forgotten, so recording one
// drops the least recently used endpoint.
func BenchmarkScorePreRequestEvicting(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, nil)
			s := newScorer(b, fmt.Sprintf(`{"lruSize": %d}`, n/2))
			req := request(scheduling.PrefixHitMap{})
			scores := make([]float64, n)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				s.Score(ctx, req, eps, scores)
				best := 0
				for i, v := range scores {
					if v > scores[best] {
						best = i
					}
				}
				s.PreRequest(ctx, req, resultFor(eps[best]))
			}
		})
	}
}

// BenchmarkScorePreRequestParallel runs cold requests end to end from
// GOMAXPROCS goroutines at once.
func BenchmarkScorePreRequestParallel(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, nil)
			s := warmedScorer(b, eps)
			results := make([]*scheduling.Result, n)
			for i, e := range eps {
				results[i] = resultFor(e)
			}
			// Every endpoint is remembered, as after a warm-up.
			for _, r := range results {
				s.lru.touch(r.Targets()[0].Key())
			}
			ctx := b.Context()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				scores := make([]float64, n)
				i := 0
				for pb.Next() {
					req := request(scheduling.PrefixHitMap{})
					s.Score(ctx, req, eps, scores)
					s.PreRequest(ctx, req, results[i%n])
					i++
				}
			})
		})
	}
}
