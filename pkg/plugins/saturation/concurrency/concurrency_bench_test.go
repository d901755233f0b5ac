package concurrency

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins/producer/inflightload"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

var sizes = []int{10, 100, 1000}

// loaded returns a detector with maxConcurrency 8, n endpoints to which an
// inflight-load-producer has charged 0–9 requests each, so that the filter
// removes some of them, and a request carrying the producer's view.
func loaded(b *testing.B, n int) (*Detector, []*scheduling.Endpoint, *scheduling.Request) {
	d := mustBuild(b, `{"maxConcurrency": 8}`)
	p, err := inflightload.New("", inflightload.DefaultParams(), schedulingtest.NewHandle(b))
	if err != nil {
		b.Fatal(err)
	}
	eps := schedulingtest.Endpoints(n, nil)
	ctx := b.Context()
	for i, e := range eps {
		res := &scheduling.Result{
			PrimaryProfile: "default",
			ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: []*scheduling.Endpoint{e}}},
		}
		for range i % 10 {
			p.PreRequest(ctx, &scheduling.Request{PromptTokens: 100}, res)
		}
	}
	req := &scheduling.Request{PromptTokens: 100}
	p.Produce(ctx, req, eps)
	return d, eps, req
}

func BenchmarkSaturation(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps, req := loaded(b, n)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				d.Saturation(ctx, req, eps)
			}
		})
	}
}

func BenchmarkFilter(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps, req := loaded(b, n)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				d.Filter(ctx, req, eps)
			}
		})
	}
}
