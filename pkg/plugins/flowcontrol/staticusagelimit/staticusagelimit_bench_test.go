package staticusagelimit_test

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/internal/fctest"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/staticusagelimit"
)

func BenchmarkCeiling(b *testing.B) {
	p, _ := staticusagelimit.New("u", staticusagelimit.DefaultParams(), nil)
	b.ReportAllocs()
	var sink float64
	for i := range b.N {
		sink += p.Ceiling(0.5, i&7)
	}
	_ = sink
}

// BenchmarkEnqueueDispatch: enqueue and dispatch under the policy at 10,
// 100 and 1000 queued requests in 10 flows.
func BenchmarkEnqueueDispatch(b *testing.B) {
	p, _ := staticusagelimit.New("u", staticusagelimit.DefaultParams(), nil)
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint("queued=", n), func(b *testing.B) {
			fctest.BenchQueue(b, flowcontrol.Config{UsageLimit: p}, n, 10)
		})
	}
}
