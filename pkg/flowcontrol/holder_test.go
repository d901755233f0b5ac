package flowcontrol_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

// holdPool is a flowcontrol.Holder like the server's: a release (by the
// dispatcher or by the fast path, both through Hold) is pending
// until the test starts it.
type holdPool struct {
	sat     float64
	pending atomic.Int64
	holds   atomic.Int64
}

func (p *holdPool) Saturation() (float64, int) { return p.sat, 1 }
func (p *holdPool) Held() bool                 { return p.pending.Load() > 0 }
func (p *holdPool) Hold(*flowcontrol.Item) bool {
	if !p.pending.CompareAndSwap(0, 1) {
		return false
	}
	p.holds.Add(1)
	return true
}

// holdFairness is global strict; the dispatcher claims the slot (Hold)
// for the item it releases.
type holdFairness struct{ p *holdPool }

func (h holdFairness) Pick(b *flowcontrol.Band) *flowcontrol.Flow {
	return flowcontrol.GlobalStrict{}.Pick(b)
}

// A band ceiling above 1 (static threshold 1.5) with the pool at 1.0 and a
// release pending: the dispatcher releases nothing until it starts, then
// one request per start, never the whole queue.
func TestPendingReleaseHoldsAboveCeilingOne(t *testing.T) {
	pool := &holdPool{sat: 1.0}
	c, err := flowcontrol.NewStarted(flowcontrol.Config{
		UsageLimit:  flowcontrol.StaticUsageLimit{Threshold: 1.5},
		DefaultBand: flowcontrol.BandConfig{Fairness: holdFairness{pool}},
	}, pool)
	require.NoError(t, err)
	pool.pending.Store(1) // one released request not yet scheduled
	for i := range 5 {
		admit(t, c, item(fmt.Sprint(i), "f", 0), t0, 0)
	}
	require.Nil(t, c.DispatchOne(1.0, 1), "a release is pending: no room")
	pool.pending.Store(0) // it started
	released := 0
	for c.DispatchOne(1.0, 1) != nil {
		released++
	}
	require.Equal(t, 1, released, "one slot releases one request")
	require.Equal(t, uint64(4), c.Stats().Requests)
}

// 50 concurrent arrivals with one free slot and nothing queued: the fast
// path admits at most one before it starts; the others wait.
func TestFastPathAdmitsOnePerFreeSlot(t *testing.T) {
	pool := &holdPool{sat: 0.5}
	c, err := flowcontrol.New(flowcontrol.Config{DefaultBand: flowcontrol.BandConfig{Fairness: holdFairness{pool}}}, pool)
	require.NoError(t, err)
	running(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var dispatched atomic.Int64
	for i := range 50 {
		wg.Go(func() {
			if c.Enqueue(ctx, item(fmt.Sprint(i), fmt.Sprint(i), 0)) == flowcontrol.Dispatched {
				dispatched.Add(1)
			}
		})
	}
	waitQueued(t, c, 49)
	require.Equal(t, int64(1), dispatched.Load(), "at most one dispatched before Started")
	cancel()
	wg.Wait()
	require.LessOrEqual(t, dispatched.Load(), int64(1))
}

// Bands that are not configured are freed when they empty: with MaxBands
// 2, priorities 1 and 2 queued and cancelled leave room for priority 3,
// which waits instead of being refused queue_full.
func TestEmptyUnconfiguredBandsAreFreed(t *testing.T) {
	c := started(t, flowcontrol.Config{MaxBands: 2})
	a, b := item("a", "f", 1), item("b", "f", 2)
	admit(t, c, a, t0, 0)
	admit(t, c, b, t0, 0)
	o, ok := c.Admit(item("x", "f", 3), t0, 0)
	require.False(t, ok, "two bands hold items: the cap holds")
	require.Equal(t, flowcontrol.RejectedQueueFull, o)
	require.Equal(t, flowcontrol.Cancelled, c.Cancel(a))
	require.Equal(t, flowcontrol.Cancelled, c.Cancel(b))
	admit(t, c, item("c", "f", 3), t0, 0)
	require.Equal(t, []string{"c"}, drain(c))
}

// A configured band stays when it empties; Reconfigure drops empty bands
// that are no longer configured and keeps the cap.
func TestConfiguredBandsStayAndReconfigureKeepsCap(t *testing.T) {
	c := started(t, flowcontrol.Config{MaxBands: 2, Bands: []flowcontrol.BandConfig{{Priority: 5}}})
	admit(t, c, item("a", "f", 1), t0, 0)
	require.Equal(t, []string{"a"}, drain(c))
	admit(t, c, item("b", "f", 2), t0, 0) // band 1 was freed
	require.NoError(t, c.Reconfigure(flowcontrol.Config{MaxBands: 2, Bands: []flowcontrol.BandConfig{{Priority: 7}, {Priority: 8}}}))
	// bands: 2 (holds b) and one of 7/8 (5 was empty and is gone); the
	// other is created on demand.
	require.Len(t, c.Stats().Bands, 2)
	require.Equal(t, []string{"b"}, drain(c))
	admit(t, c, item("d", "f", 8), t0, 0)
	admit(t, c, item("e", "f", 7), t0, 0)
	require.Len(t, c.Stats().Bands, 2)
	require.Equal(t, []string{"d", "e"}, drain(c))
}

// A sheddable request is shed at its band's ceiling, not at 1.0: with a
// static threshold 0.8 and the pool at 0.9 it is refused saturated, and no
// negative band is created (none configured, no negative template).
func TestSheddableShedAtCeilingBelowOne(t *testing.T) {
	pool := newSwitchPool(0.9)
	c, err := flowcontrol.New(flowcontrol.Config{UsageLimit: flowcontrol.StaticUsageLimit{Threshold: 0.8}}, pool)
	require.NoError(t, err)
	running(t, c)
	require.Equal(t, flowcontrol.RejectedSaturated, c.Enqueue(context.Background(), item("shed", "f", -1)))
	require.Empty(t, c.Stats().Bands, "no negative band created")

	// While others wait, it is shed too, without creating a band.
	res := enqueueAsync(c, context.Background(), item("wait", "f", 0))
	waitQueued(t, c, 1)
	require.Equal(t, flowcontrol.RejectedSaturated, c.Enqueue(context.Background(), item("shed2", "f", -1)))
	for _, b := range c.Stats().Bands {
		require.GreaterOrEqual(t, b.Priority, 0, "no negative band created")
	}
	pool.sat.Store(0.1)
	c.Notify()
	require.Equal(t, flowcontrol.Dispatched, <-res)
}
