package labelselector

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func BenchmarkFilter(b *testing.B) {
	roles := []string{"decode", "prefill", "prefill-decode"}
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) {
				e.Label("llm-d.ai/role", roles[i%len(roles)]).Label("app", "vllm")
				if i%10 == 0 {
					e.Label("draining", "true")
				}
			})
			f, err := New(Type, Params{
				MatchLabels: map[string]string{"app": "vllm"},
				MatchExpressions: []Requirement{
					{Key: "llm-d.ai/role", Operator: In, Values: []string{"decode", "prefill-decode"}},
					{Key: "draining", Operator: DoesNotExist},
				},
			}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				f.Filter(b.Context(), nil, eps)
			}
		})
	}
}
