package flowcontrol_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

// BenchmarkEnqueueDispatch measures one enqueue plus one dispatch with
// `queued` requests waiting across 100 flows (steady state: the queue
// depth stays constant), for both fairness policies.
func BenchmarkEnqueueDispatch(b *testing.B) {
	const flows = 100
	for _, fair := range []struct {
		name string
		p    flowcontrol.FairnessPolicy
	}{{"global-strict", flowcontrol.GlobalStrict{}}, {"round-robin", flowcontrol.RoundRobin{}}} {
		for _, queued := range []int{1, 100, 10_000} {
			b.Run(fmt.Sprintf("%s/queued=%d", fair.name, queued), func(b *testing.B) {
				clk := testingclock.NewFakeClock(t0)
				c, err := flowcontrol.NewStarted(flowcontrol.Config{Clock: clk, DefaultBand: flowcontrol.BandConfig{Fairness: fair.p}}, roomy)
				if err != nil {
					b.Fatal(err)
				}
				now := t0
				for i := range queued {
					now = now.Add(time.Microsecond)
					it := &flowcontrol.Item{RequestID: "r", Flow: flowcontrol.FlowKey{ID: fmt.Sprint("flow", i%flows)}, Bytes: 1000}
					if _, ok := c.Admit(it, now, 0); !ok {
						b.Fatal("not admitted")
					}
				}
				var it *flowcontrol.Item
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					it = c.DispatchOne(0, 1)
					now = now.Add(time.Microsecond)
					if _, ok := c.Admit(it, now, 0); !ok {
						b.Fatal("not admitted")
					}
				}
			})
		}
	}
}

// BenchmarkEnqueueFastPath is Enqueue when nothing waits and the pool has
// room: the cost flow control adds to every request of a pool that is not
// saturated.
func BenchmarkEnqueueFastPath(b *testing.B) {
	c, err := flowcontrol.NewStarted(flowcontrol.Config{}, roomy)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		it := &flowcontrol.Item{Flow: flowcontrol.FlowKey{ID: "f"}}
		for pb.Next() {
			if c.Enqueue(ctx, it) != flowcontrol.Dispatched {
				b.Fatal("not dispatched")
			}
		}
	})
}
