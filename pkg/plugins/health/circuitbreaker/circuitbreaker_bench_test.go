package circuitbreaker

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func benchBreaker(b *testing.B, n int) (*Breaker, []*scheduling.Endpoint) {
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: prometheus.NewRegistry(), Seed: 1})
	pl, err := Registration.Factory("cb", nil, h)
	if err != nil {
		b.Fatal(err)
	}
	eps := schedulingtest.Endpoints(n, func(_ int, e *schedulingtest.EndpointBuilder) { e.Health(&scheduling.EndpointHealth{}) })
	return pl.(*Breaker), eps
}

// BenchmarkRequest is one request's cost on the request path: Filter,
// PreRequest and ResponseComplete, with every breaker closed (the usual
// case) and with a tenth of the endpoints' breakers open.
func BenchmarkRequest(b *testing.B) {
	for _, open := range []bool{false, true} {
		for _, n := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("open=%v/endpoints=%d", open, n), func(b *testing.B) {
				br, eps := benchBreaker(b, n)
				if open {
					for _, e := range eps[:n/10] {
						for range br.p.ConsecutiveFailures {
							q := &scheduling.Request{}
							br.PreRequest(context.Background(), q, resultOf(e))
							br.ResponseComplete(context.Background(), q, &scheduling.Response{StatusCode: 500}, e)
						}
					}
				}
				resp := &scheduling.Response{StatusCode: 200}
				results := make([]*scheduling.Result, n)
				for i, e := range eps {
					results[i] = resultOf(e)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					q := &scheduling.Request{}
					kept := br.Filter(context.Background(), q, eps)
					target := kept[i%len(kept)]
					br.PreRequest(context.Background(), q, results[i%n])
					br.ResponseComplete(context.Background(), q, resp, target)
					i++
				}
			})
		}
	}
}

func resultOf(e *scheduling.Endpoint) *scheduling.Result {
	return &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{"p": {Targets: []*scheduling.Endpoint{e}}}}
}
