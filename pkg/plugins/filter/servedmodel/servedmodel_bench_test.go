package servedmodel

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkFilter is Admit and Filter for one request over 10, 100 and
// 1000 endpoints: none declaring models, and each declaring two models
// (half serving the requested one, by alias).
func BenchmarkFilter(b *testing.B) {
	for _, declared := range []bool{false, true} {
		for _, n := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("declared=%v/endpoints=%d", declared, n), func(b *testing.B) {
				eps := schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) {
					if !declared {
						return
					}
					if i%2 == 0 {
						e.Models(model("llama-8b", "llama"), model("qwen"))
					} else {
						e.Models(model("mistral"), model("qwen"))
					}
				})
				f := newFilter(b)
				b.ReportAllocs()
				for b.Loop() {
					req := &scheduling.Request{Model: "llama", TargetModel: "llama"}
					if f.Admit(context.Background(), req, eps) != nil {
						b.Fatal("refused")
					}
					if len(f.Filter(context.Background(), req, eps)) == 0 {
						b.Fatal("nothing kept")
					}
				}
			})
		}
	}
}
