package callerscope

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkFilter is Admit and Filter for one request over 10, 100 and
// 1000 endpoints: an unknown caller in a pool without internal endpoints
// (the fast path), and a caller with a label-selector scope in a pool
// where a tenth of the endpoints are internal.
func BenchmarkFilter(b *testing.B) {
	for _, scoped := range []bool{false, true} {
		for _, n := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("scoped=%v/endpoints=%d", scoped, n), func(b *testing.B) {
				eps := schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) {
					if !scoped {
						return
					}
					if i%2 == 0 {
						e.Label("tier", "gold")
					}
					if i%10 == 0 {
						e.Internal()
					}
				})
				f := newFilter(b, `{"callers": {"gold": {"allowedSelector": {"matchLabels": {"tier": "gold"}}}}}`)
				req := &scheduling.Request{Headers: map[string]string{DefaultCallerHeader: "anyone"}}
				if scoped {
					req.Headers[DefaultCallerHeader] = "gold"
				}
				b.ReportAllocs()
				for b.Loop() {
					if f.Admit(context.Background(), req, eps) != nil || len(f.Filter(context.Background(), req, eps)) == 0 {
						b.Fatal("refused")
					}
				}
			})
		}
	}
}
