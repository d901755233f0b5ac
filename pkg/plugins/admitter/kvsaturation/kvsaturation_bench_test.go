package kvsaturation

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// BenchmarkAdmit measures the worst case: every candidate is saturated, so
// each is read and the request is refused.
func BenchmarkAdmit(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			a := newAdmitter(b, "", prometheus.NewRegistry())
			eps := make([]*scheduling.Endpoint, n)
			for i := range eps {
				eps[i] = kv(fmt.Sprintf("e%d", i), 0.99, 0)
			}
			ctx := context.Background()
			req := &scheduling.Request{ID: "r", TargetModel: "m"}
			b.ReportAllocs()
			for b.Loop() {
				if a.Admit(ctx, req, eps) == nil {
					b.Fatal("admitted")
				}
			}
		})
	}
}
