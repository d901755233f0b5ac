package globalstrict_test

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/globalstrict"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/internal/fctest"
)

// BenchmarkEnqueueDispatch: enqueue and dispatch with one request waiting
// in each of 10, 100 and 1000 flows (a pick is O(active flows)).
func BenchmarkEnqueueDispatch(b *testing.B) {
	p, _ := globalstrict.New("gs", globalstrict.DefaultParams(), nil)
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint("flows=", n), func(b *testing.B) {
			fctest.BenchQueue(b, flowcontrol.Config{DefaultBand: flowcontrol.BandConfig{Fairness: p}}, n, n)
		})
	}
}
