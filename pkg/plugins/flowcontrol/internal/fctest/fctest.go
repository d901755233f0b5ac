// Package fctest helps the flow-control policy tests: it runs items
// through a real flowcontrol.Controller, one band and one flow, and
// returns the dispatch order.
package fctest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

// TokenPool is a pool that has room for as many dispatch attempts as it
// was allowed, and is saturated otherwise.
type TokenPool struct{ tokens atomic.Int64 }

// Saturation implements flowcontrol.Pool; each call uses one token.
func (p *TokenPool) Saturation() (float64, int) {
	if p.tokens.Add(-1) >= 0 {
		return 0, 1
	}
	return 1, 1
}

// Controller is a running controller on a fake clock over a TokenPool.
type Controller struct {
	*flowcontrol.Controller
	Clock *testingclock.FakeClock
	Pool  *TokenPool
}

// Allow lets n more requests leave.
func (c *Controller) Allow(n int64) {
	c.Pool.tokens.Store(n)
	c.Notify()
}

// Started returns a controller whose dispatcher runs until stop.
func Started(t testing.TB, cfg flowcontrol.Config) (*Controller, context.Context, func()) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	cfg.Clock = clk
	pool := &TokenPool{}
	fc, err := flowcontrol.New(cfg, pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fc.Run(ctx) }()
	for !fc.Stats().Running {
		time.Sleep(50 * time.Microsecond)
	}
	return &Controller{Controller: fc, Clock: clk, Pool: pool}, context.Background(), func() { cancel(); <-done }
}

// Arrival is one request of a test: its id, enqueue time, TTL and headers.
type Arrival struct {
	ID       string
	At       time.Time
	TTL      time.Duration
	Received time.Time
	Headers  map[string]string
	Flow     string
}

// Order enqueues the arrivals into one controller whose default band uses
// ordering (and fairness, if given) while the pool is saturated, then
// releases them one by one and returns their ids in dispatch order. The
// arrivals' times must not move the clock past any earlier arrival's TTL.
func Order(t testing.TB, ordering flowcontrol.OrderingPolicy, in []Arrival, fairness ...flowcontrol.FairnessPolicy) []string {
	t.Helper()
	band := flowcontrol.BandConfig{Ordering: ordering}
	if len(fairness) > 0 {
		band.Fairness = fairness[0]
	}
	c, ctx, stop := Started(t, flowcontrol.Config{DefaultBand: band})
	defer stop()
	results := make(chan string, len(in))
	for _, a := range in {
		it := &flowcontrol.Item{RequestID: a.ID, Flow: flowcontrol.FlowKey{ID: a.Flow}, TTL: a.TTL, Received: a.Received, Headers: a.Headers}
		c.Clock.SetTime(a.At)
		n := c.Stats().Requests
		go func() {
			if c.Enqueue(ctx, it) == flowcontrol.Dispatched {
				results <- it.RequestID
			}
		}()
		for c.Stats().Requests == n {
			time.Sleep(50 * time.Microsecond)
		}
	}
	var out []string
	for range in {
		c.Allow(1)
		out = append(out, <-results)
	}
	return out
}

// BenchOrderKey measures OrderKey on an item with the given headers.
func BenchOrderKey(b *testing.B, p flowcontrol.OrderingPolicy, headers map[string]string) {
	it := &flowcontrol.Item{Headers: headers, Received: time.Unix(1000, 0), TTL: time.Second}
	b.ReportAllocs()
	var sink int64
	for range b.N {
		sink += p.OrderKey(it)
	}
	_ = sink
}

// BenchQueue measures one enqueue and one dispatch through a running
// controller configured by cfg, with queued requests waiting spread over
// flows flows (the depth stays constant: each iteration adds one to the
// flow next in turn and releases one).
func BenchQueue(b *testing.B, cfg flowcontrol.Config, queued, flows int) {
	c, ctx, stop := Started(b, cfg)
	defer stop()
	done := make(chan struct{}, queued+1)
	names := make([]string, flows)
	for i := range names {
		names[i] = "flow-" + strconv.Itoa(i)
	}
	enqueue := func(i int) {
		it := &flowcontrol.Item{Flow: flowcontrol.FlowKey{ID: names[i%flows]}, Bytes: 1000}
		go func() { c.Enqueue(ctx, it); done <- struct{}{} }()
	}
	for i := range queued {
		enqueue(i)
	}
	for c.Stats().Requests < uint64(queued) {
		time.Sleep(50 * time.Microsecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		enqueue(i)
		c.Allow(1)
		<-done
	}
	b.StopTimer()
	// Release everything, also a request whose goroutine is not queued yet.
	for received := 0; received < queued; {
		select {
		case <-done:
			received++
		default:
			c.Allow(int64(queued) + 1)
			time.Sleep(50 * time.Microsecond)
		}
	}
}
