package usageweight

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkScore scores pools whose endpoints all declare limits, have
// metered usage and (quota-aware) a fresh observation.
func BenchmarkScore(b *testing.B) {
	for _, quota := range []bool{false, true} {
		for _, n := range []int{10, 100, 1000} {
			p := DefaultParams()
			p.QuotaAware.Enabled = quota
			s, _, _ := newScorer(b, p)
			eps := schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) {
				e.Attr(ProviderTPMAttribute, 100000).Attr(ProviderRPMAttribute, 100)
			})
			for i, e := range eps {
				complete(s, e, i)
				received(s, e, openAI("100", fmt.Sprint(i%100)))
			}
			scores := make([]float64, n)
			req := &scheduling.Request{}
			b.Run(fmt.Sprintf("quotaAware=%v/endpoints=%d", quota, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					s.Score(context.Background(), req, eps, scores)
				}
			})
		}
	}
}

// BenchmarkHooks is the per-request cost of the response hooks.
func BenchmarkHooks(b *testing.B) {
	s, _, _ := newScorer(b, quotaParams())
	e := ep("a", 1000, 10)
	h := map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "50",
		"x-ratelimit-limit-tokens": "10000", "x-ratelimit-remaining-tokens": "5000", "content-type": "application/json"}
	resp := &scheduling.Response{StatusCode: 200, Headers: h, Usage: scheduling.Usage{TotalTokens: 10}}
	req := &scheduling.Request{}
	b.ReportAllocs()
	for b.Loop() {
		s.ResponseReceived(context.Background(), req, resp, e)
		s.ResponseComplete(context.Background(), req, resp, e)
	}
}
