package bylabel

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func BenchmarkFilter(b *testing.B) {
	roles := []string{"decode", "prefill", "both"}
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) {
				e.Label("llm-d.ai/role", roles[i%len(roles)]).Label("app", "vllm")
			})
			f, err := New(Type, Params{Label: "llm-d.ai/role", ValidValues: []string{"decode", "both"}}, nil)
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
