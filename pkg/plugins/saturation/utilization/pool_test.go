package utilization

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// TestPoolSaturation: the request-free pool view is the per-request value
// (the detector reads the endpoints' scraped metrics only), stale
// endpoints and an empty pool included.
func TestPoolSaturation(t *testing.T) {
	t.Parallel()
	const params = `{"queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.9, "metricsStalenessThreshold": "100ms"}`
	tests := []struct {
		name string
		eps  []ep
		want float64
	}{
		{name: "no candidates is saturated", want: 1},
		{name: "idle", eps: []ep{{0, 0, 0}}, want: 0},
		{name: "mean over fresh and stale", eps: []ep{{0, 0, 0}, {5, 0, 0}, {0, 0.45, 0}, {0, 0, time.Second}}, want: (0 + 1 + 0.5 + 1) / 4.0},
		{name: "over threshold", eps: []ep{{10, 0.1, 0}, {1, 0.99, 0}}, want: (2 + 1.1) / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := detector(t, params)
			eps := endpoints(tt.eps)
			got := d.PoolSaturation(eps)
			if math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("PoolSaturation() = %v, want %v", got, tt.want)
			}
			if per := d.Saturation(t.Context(), &scheduling.Request{}, eps); per != got {
				t.Errorf("PoolSaturation() = %v, per-request Saturation() = %v", got, per)
			}
		})
	}
}

func BenchmarkPoolSaturation(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps := benchDetector(b), benchEndpoints(n)
			b.ReportAllocs()
			for b.Loop() {
				d.PoolSaturation(eps)
			}
		})
	}
}
