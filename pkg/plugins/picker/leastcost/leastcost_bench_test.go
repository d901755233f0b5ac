package leastcost

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// pricedPool returns n endpoints declaring model m at 10 price levels
// (ties to rotate), every fifth one unpriced (an entry without pricing).
func pricedPool(n int) []scheduling.ScoredEndpoint {
	eps := schedulingtest.Endpoints(n, func(i int, b *schedulingtest.EndpointBuilder) {
		entry := scheduling.ModelEntry{Name: "m", Aliases: []string{"m-alias"}}
		if i%5 != 0 {
			entry.Pricing = price(float64(i%10)/10+0.1, 1)
		}
		b.Models(scheduling.ModelEntry{Name: "other"}, entry)
	})
	return scoredOf(eps...)
}

func benchmarkPick(b *testing.B, max int) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, nil, max, map[string]scheduling.Price{"m": {Input: 1, Output: 1}})
			scored := pricedPool(n)
			req := chatReq("m", 500, 200)
			b.ReportAllocs()
			for b.Loop() {
				p.Pick(b.Context(), req, scored)
			}
		})
	}
}

// BenchmarkPick picks the cheapest endpoint, rotating among ties.
func BenchmarkPick(b *testing.B) { benchmarkPick(b, 1) }

// BenchmarkPickThree picks a primary and two fallbacks (a full ranking).
func BenchmarkPickThree(b *testing.B) { benchmarkPick(b, 3) }

// BenchmarkPricingWarnings checks a pool's pricing once (the server and
// epp validate, not the request path).
func BenchmarkPricingWarnings(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			scored := pricedPool(n)
			eps := make([]*scheduling.Endpoint, n)
			for i := range scored {
				eps[i] = scored[i].Endpoint
			}
			b.ReportAllocs()
			for b.Loop() {
				PricingWarnings(eps, DefaultParams())
			}
		})
	}
}
