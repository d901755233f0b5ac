package inflightload

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkRequest measures one request's whole life in the producer:
// Produce, reading every candidate's load (what a scorer does), PreRequest,
// the first chunk and completion.
//
// With host=true the endpoints carry the host's accounting (LoadKey), as
// the datastore publishes them; with host=false the producer counts.
func BenchmarkRequest(b *testing.B) {
	for _, host := range []bool{true, false} {
		for _, acc := range accountings {
			for _, n := range []int{10, 100, 1000} {
				benchRequest(b, host, acc.name, acc.params, n)
			}
		}
	}
}

func benchRequest(b *testing.B, host bool, accName string, params Params, n int) {
	p := newProducer(b, params)
	eps := schedulingtest.Endpoints(n, func(_ int, e *schedulingtest.EndpointBuilder) {
		if host {
			e.Load(schedulingtest.NewFakeLoad(0, 0))
		}
	})
	results := make([]*scheduling.Result, n)
	for i, e := range eps {
		results[i] = resultFor(e)
	}
	resp := &scheduling.Response{}
	b.Run(fmt.Sprintf("host=%v/accounting=%s/endpoints=%d", host, accName, n), func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			req := &scheduling.Request{PromptTokens: 512}
			p.Produce(b.Context(), req, eps)
			view, _ := scheduling.InFlightLoadKey.Get(req)
			for _, e := range eps {
				view.InFlight(e.Key())
			}
			p.PreRequest(b.Context(), req, results[i%n])
			p.ResponseStreaming(b.Context(), req, resp, nil, nil)
			p.ResponseComplete(b.Context(), req, resp, nil)
			i++
		}
	})
}

// BenchmarkPreRequestParallel measures counting and releasing under
// contention.
func BenchmarkPreRequestParallel(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		p := newProducer(b, DefaultParams())
		eps := schedulingtest.Endpoints(n, nil)
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				resp := &scheduling.Response{}
				for pb.Next() {
					req := &scheduling.Request{PromptTokens: 512}
					p.PreRequest(b.Context(), req, resultFor(eps[i%n]))
					p.ResponseComplete(b.Context(), req, resp, nil)
					i++
				}
			})
		})
	}
}
