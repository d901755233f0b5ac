package flowcontrol_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

// switchPool is a pool whose saturation and endpoint count tests set.
type switchPool struct {
	sat atomic.Value
	eps atomic.Int64
}

func newSwitchPool(sat float64) *switchPool {
	p := &switchPool{}
	p.sat.Store(sat)
	p.eps.Store(1)
	return p
}

func (p *switchPool) Saturation() (float64, int) { return p.sat.Load().(float64), int(p.eps.Load()) }

// running starts c's dispatcher and stops it at the end of the test.
func running(t *testing.T, c *flowcontrol.Controller) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return c.Stats().Running }, 5*time.Second, time.Millisecond)
	return func() { cancel(); <-done }
}

func enqueueAsync(c *flowcontrol.Controller, ctx context.Context, it *flowcontrol.Item) <-chan flowcontrol.Outcome {
	res := make(chan flowcontrol.Outcome, 1)
	go func() { res <- c.Enqueue(ctx, it) }()
	return res
}

func waitQueued(t *testing.T, c *flowcontrol.Controller, n uint64) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Stats().Requests == n }, 5*time.Second, time.Millisecond)
}

func TestEnqueueWaitsForRoom(t *testing.T) {
	pool := newSwitchPool(0.2)
	c, err := flowcontrol.New(flowcontrol.Config{}, pool)
	require.NoError(t, err)
	running(t, c)
	require.Equal(t, flowcontrol.Dispatched, c.Enqueue(context.Background(), item("now", "f", 0)), "room and nothing queued: at once")
	pool.sat.Store(1.0)
	res := enqueueAsync(c, context.Background(), item("later", "f", 0))
	waitQueued(t, c, 1)
	select {
	case o := <-res:
		t.Fatalf("left while saturated: %v", o)
	case <-time.After(20 * time.Millisecond):
	}
	pool.sat.Store(0.5)
	c.Notify()
	require.Equal(t, flowcontrol.Dispatched, <-res)
	s := c.Stats()
	require.Equal(t, uint64(2), s.Outcomes[flowcontrol.Dispatched])
	require.Zero(t, s.Requests)
}

func TestEnqueueCancelledNeverDispatched(t *testing.T) {
	pool := newSwitchPool(1.0)
	c, err := flowcontrol.New(flowcontrol.Config{}, pool)
	require.NoError(t, err)
	running(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	res := enqueueAsync(c, ctx, item("gone", "f", 0))
	waitQueued(t, c, 1)
	cancel()
	require.Equal(t, flowcontrol.Cancelled, <-res)
	require.Zero(t, c.Stats().Requests, "left the queue at once")
	pool.sat.Store(0.0)
	c.Notify()
	require.Equal(t, flowcontrol.Dispatched, c.Enqueue(context.Background(), item("next", "f", 0)))
	s := c.Stats()
	require.Equal(t, uint64(1), s.Outcomes[flowcontrol.Dispatched], "only the second request was dispatched")
	require.Equal(t, uint64(1), s.Outcomes[flowcontrol.Cancelled])
}

func TestEnqueueTTLWithFakeClock(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	pool := newSwitchPool(1.0)
	// Started without Run: the waiters' timers are the clock's only waiters.
	c, err := flowcontrol.NewStarted(flowcontrol.Config{Clock: clk, DefaultRequestTTL: 10 * time.Second, NoEndpointRequestTTL: 30 * time.Second}, pool)
	require.NoError(t, err)
	it := item("slow", "f", 0)
	res := enqueueAsync(c, context.Background(), it)
	require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond)
	clk.Step(10 * time.Second)
	require.Equal(t, flowcontrol.ExpiredTTL, <-res)
	require.Equal(t, 10*time.Second, it.Wait())

	// With no endpoint, the no-endpoint budget applies and answers 503.
	require.Nil(t, c.DispatchOne(1, 0))
	res = enqueueAsync(c, context.Background(), item("cold", "f", 0))
	require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond)
	clk.Step(10 * time.Second) // the TTL with endpoints is spent, but there are none
	require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond)
	select {
	case o := <-res:
		t.Fatalf("left after 10s without endpoints: %v", o)
	default:
	}
	clk.Step(20 * time.Second)
	o := <-res
	require.Equal(t, flowcontrol.NoEndpoint, o)
	require.Equal(t, "no_endpoints", o.String())
}

func TestEnqueueContextDeadlineIsTTL(t *testing.T) {
	c, err := flowcontrol.New(flowcontrol.Config{}, newSwitchPool(1.0))
	require.NoError(t, err)
	running(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	it := item("deadline", "f", 0)
	require.Equal(t, flowcontrol.ExpiredTTL, c.Enqueue(ctx, it))
	require.Zero(t, c.Stats().Requests)
}

func TestRunStopRefusesWaiters(t *testing.T) {
	c, err := flowcontrol.New(flowcontrol.Config{}, newSwitchPool(1.0))
	require.NoError(t, err)
	require.Equal(t, flowcontrol.Stopped, c.Enqueue(context.Background(), item("early", "f", 0)), "before Run")
	stop := running(t, c)
	res := enqueueAsync(c, context.Background(), item("waiting", "f", 0))
	waitQueued(t, c, 1)
	stop()
	require.Equal(t, flowcontrol.Stopped, <-res)
	require.Equal(t, flowcontrol.Stopped, c.Enqueue(context.Background(), item("late", "f", 0)))
	require.Equal(t, 503, flowcontrol.Stopped.StatusCode())
}

func TestSheddableRefusedWhenSaturated(t *testing.T) {
	pool := newSwitchPool(1.0)
	c, err := flowcontrol.New(flowcontrol.Config{}, pool)
	require.NoError(t, err)
	running(t, c)
	o := c.Enqueue(context.Background(), item("shed", "f", -1))
	require.Equal(t, flowcontrol.RejectedSaturated, o)
	require.Equal(t, 429, o.StatusCode())
	require.Equal(t, "saturated", o.String())
	pool.sat.Store(0.3)
	require.Equal(t, flowcontrol.Dispatched, c.Enqueue(context.Background(), item("room", "f", -1)), "not saturated: served")

	// With a negative band (llm-d's defaultNegativePriorityBand), it waits.
	pool.sat.Store(1.0)
	c2, err := flowcontrol.New(flowcontrol.Config{DefaultNegativeBand: &flowcontrol.BandConfig{}}, pool)
	require.NoError(t, err)
	running(t, c2)
	res := enqueueAsync(c2, context.Background(), item("queued", "f", -1))
	waitQueued(t, c2, 1)
	pool.sat.Store(0.0)
	c2.Notify()
	require.Equal(t, flowcontrol.Dispatched, <-res)
}

func TestEnqueueFastPathAllocatesNothing(t *testing.T) {
	c, err := flowcontrol.New(flowcontrol.Config{}, newSwitchPool(0.1))
	require.NoError(t, err)
	running(t, c)
	it := item("fast", "f", 0)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if c.Enqueue(ctx, it) != flowcontrol.Dispatched {
			t.Fatal("not dispatched")
		}
	})
	require.Zero(t, allocs)
}

func TestOutcomeLabels(t *testing.T) {
	var names []string
	for _, o := range flowcontrol.Outcomes() {
		names = append(names, o.String())
	}
	require.Equal(t, []string{"dispatched", "queue_full", "saturated", "ttl_expired", "no_endpoints", "cancelled", "flow_control_stopped"}, names)
}

// TestReleasedByPolling: with nobody calling Notify, a waiting request
// leaves within a few poll intervals of the pool gaining room.
func TestReleasedByPolling(t *testing.T) {
	pool := newSwitchPool(1.0)
	c, err := flowcontrol.New(flowcontrol.Config{PollInterval: 2 * time.Millisecond}, pool)
	require.NoError(t, err)
	running(t, c)
	res := enqueueAsync(c, context.Background(), item("poll", "f", 0))
	waitQueued(t, c, 1)
	time.Sleep(10 * time.Millisecond) // several polls while saturated
	pool.sat.Store(0.0)
	select {
	case o := <-res:
		require.Equal(t, flowcontrol.Dispatched, o)
	case <-time.After(5 * time.Second):
		t.Fatal("not released by polling")
	}
}

type cycles struct{ n, dispatched atomic.Int64 }

func (c *cycles) DispatchCycle(_ time.Duration, dispatched int) {
	c.n.Add(1)
	c.dispatched.Add(int64(dispatched))
}

func TestObserverSeesDispatchCycles(t *testing.T) {
	pool := newSwitchPool(1.0)
	obs := &cycles{}
	c, err := flowcontrol.New(flowcontrol.Config{Observer: obs}, pool)
	require.NoError(t, err)
	running(t, c)
	a := enqueueAsync(c, context.Background(), item("a", "f", 0))
	b := enqueueAsync(c, context.Background(), item("b", "f", 0))
	waitQueued(t, c, 2)
	pool.sat.Store(0.0)
	c.Notify()
	require.Equal(t, flowcontrol.Dispatched, <-a)
	require.Equal(t, flowcontrol.Dispatched, <-b)
	require.Eventually(t, func() bool { return obs.dispatched.Load() == 2 }, 5*time.Second, time.Millisecond)
	require.Positive(t, obs.n.Load())
}
