package server

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

// freePool is a pool with free of 64 slots free whose Holder is the
// gate's; its saturation does not change with releases, so the drain rate
// measured is the gate's alone.
type freePool struct {
	g    *flowGate
	free int
}

func (p freePool) Saturation() (float64, int) { return float64(64-p.free) / 64, 1 }
func (p freePool) Held() bool                 { return p.g.pool.Held() }
func (p freePool) Hold(it *flowcontrol.Item) bool {
	return p.g.pool.Hold(it)
}

// BenchmarkFlowGateDrain: K requests queued behind a pending release, K
// slots free; the time to release all K (each released request starts at
// once, as a request path that schedules in no time). ns/release is one
// release round trip (release, Started, Notify, the dispatcher's next
// look), so draining K takes K round trips: releases are serial.
func BenchmarkFlowGateDrain(b *testing.B) {
	for _, k := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("free=%d", k), func(b *testing.B) {
			g, _ := newTestGate()
			g.now = time.Now
			g.c = mustController(b, g, freePool{g: g, free: k})
			ctx, cancel := context.WithCancel(context.Background())
			var run sync.WaitGroup
			run.Add(1)
			go func() { defer run.Done(); g.c.Run(ctx) }()
			defer run.Wait()
			defer cancel()
			for !g.c.Stats().Running {
				runtime.Gosched()
			}
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				x := &flowcontrol.Item{RequestID: "x"}
				if !g.pool.Hold(x) {
					b.Fatal("slot not free")
				}
				var wg sync.WaitGroup
				for j := range k {
					wg.Add(1)
					go func() {
						defer wg.Done()
						it := &flowcontrol.Item{RequestID: fmt.Sprintf("%d-%d", i, j), Flow: flowcontrol.FlowKey{ID: fmt.Sprint(j % 4)}}
						if o := g.c.Enqueue(ctx, it); o != flowcontrol.Dispatched {
							b.Errorf("outcome %v", o)
						}
						g.Started(it)
					}()
				}
				for g.c.Stats().Requests != uint64(k) {
					runtime.Gosched()
				}
				b.StartTimer()
				g.Started(x)
				wg.Wait()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/release")
		})
	}
}
