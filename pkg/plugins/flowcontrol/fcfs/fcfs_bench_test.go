package fcfs_test

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/fcfs"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/internal/fctest"
)

func BenchmarkOrderKey(b *testing.B) {
	p, _ := fcfs.New("fcfs", fcfs.DefaultParams(), nil)
	fctest.BenchOrderKey(b, p, nil)
}

// BenchmarkEnqueueDispatch: enqueue and dispatch at 10, 100 and 1000
// queued requests in 10 flows.
func BenchmarkEnqueueDispatch(b *testing.B) {
	p, _ := fcfs.New("fcfs", fcfs.DefaultParams(), nil)
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprint("queued=", n), func(b *testing.B) {
			fctest.BenchQueue(b, flowcontrol.Config{DefaultBand: flowcontrol.BandConfig{Ordering: p}}, n, 10)
		})
	}
}
