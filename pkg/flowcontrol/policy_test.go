package flowcontrol_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/edf"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/slodeadline"
)

var t0 = time.Unix(1_700_000_000, 0)

var roomy = flowcontrol.PoolFunc(func() (float64, int) { return 0, 1 })

func started(t testing.TB, cfg flowcontrol.Config) *flowcontrol.Controller {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = testingclock.NewFakeClock(t0)
	}
	c, err := flowcontrol.NewStarted(cfg, roomy)
	require.NoError(t, err)
	return c
}

func item(id string, flow string, prio int) *flowcontrol.Item {
	return &flowcontrol.Item{RequestID: id, Flow: flowcontrol.FlowKey{ID: flow, Priority: prio}, Bytes: 10}
}

func admit(t testing.TB, c *flowcontrol.Controller, it *flowcontrol.Item, at time.Time, ttl time.Duration) {
	t.Helper()
	o, ok := c.Admit(it, at, ttl)
	require.True(t, ok, "%s: %v", it.RequestID, o)
}

// drain dispatches with room until nothing leaves and returns the ids in
// dispatch order.
func drain(c *flowcontrol.Controller) []string {
	var out []string
	for it := c.DispatchOne(0, 1); it != nil; it = c.DispatchOne(0, 1) {
		out = append(out, it.RequestID)
	}
	return out
}

func TestFCFSOrderWithinFlow(t *testing.T) {
	c := started(t, flowcontrol.Config{})
	// Enqueued out of id order; two at the same instant keep their order.
	admit(t, c, item("b", "f", 0), t0.Add(2*time.Millisecond), 0)
	admit(t, c, item("a", "f", 0), t0.Add(time.Millisecond), 0) // arrives earlier in clock time
	admit(t, c, item("c", "f", 0), t0.Add(3*time.Millisecond), 0)
	admit(t, c, item("d", "f", 0), t0.Add(3*time.Millisecond), 0)
	require.Equal(t, []string{"a", "b", "c", "d"}, drain(c))
}

func TestGlobalStrictServesOldestAcrossFlows(t *testing.T) {
	c := started(t, flowcontrol.Config{})
	for i, f := range []string{"x", "x", "y", "x", "z", "y"} {
		admit(t, c, item(fmt.Sprint(i), f, 0), t0.Add(time.Duration(i)*time.Millisecond), 0)
	}
	require.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, drain(c), "one band served as one queue")
}

func TestEDFByDeadline(t *testing.T) {
	pol, err := edf.New("edf", edf.DefaultParams(), nil)
	require.NoError(t, err)
	c := started(t, flowcontrol.Config{DefaultBand: flowcontrol.BandConfig{Ordering: pol}})
	admit(t, c, item("ttl30", "f", 0), t0, 30*time.Second)
	admit(t, c, item("none", "f", 0), t0, 0)
	admit(t, c, item("ttl10", "f", 0), t0.Add(time.Second), 10*time.Second) // deadline t0+11s
	admit(t, c, item("ttl20", "f", 0), t0, 20*time.Second)
	admit(t, c, item("ttl11", "f", 0), t0, 11*time.Second) // same deadline as ttl10, queued later
	admit(t, c, item("none2", "f", 0), t0, 0)
	require.Equal(t, []string{"ttl10", "ttl11", "ttl20", "ttl30", "none", "none2"}, drain(c))
}

func TestSLODeadlineOrder(t *testing.T) {
	pol, err := slodeadline.New("slo", slodeadline.DefaultParams(), nil)
	require.NoError(t, err)
	c := started(t, flowcontrol.Config{DefaultBand: flowcontrol.BandConfig{Ordering: pol}})
	with := func(id, hdr, v string, received time.Time) *flowcontrol.Item {
		it := item(id, "f", 0)
		it.Received = received
		if hdr != "" {
			it.Headers = map[string]string{hdr: v}
		}
		return it
	}
	admit(t, c, with("slo500", slodeadline.HeaderLLMD, "500", t0), t0, 0)
	admit(t, c, with("none", "", "", t0), t0, 0)
	admit(t, c, with("gie100", slodeadline.HeaderGIE, "100", t0), t0, 0)
	admit(t, c, with("bad", slodeadline.HeaderLLMD, "soon", t0), t0, 0)
	admit(t, c, with("late200", slodeadline.HeaderLLMD, " 200 ", t0.Add(time.Second)), t0.Add(time.Second), 0)
	require.Equal(t, []string{"gie100", "slo500", "late200", "none", "bad"}, drain(c))
}

func TestRoundRobinAcrossFlows(t *testing.T) {
	c := started(t, flowcontrol.Config{DefaultBand: flowcontrol.BandConfig{Fairness: flowcontrol.RoundRobin{}}})
	// a has 4 waiting, b 2, c 1, queued in flow blocks.
	for i := range 4 {
		admit(t, c, item(fmt.Sprint("a", i), "a", 0), t0, 0)
	}
	for i := range 2 {
		admit(t, c, item(fmt.Sprint("b", i), "b", 0), t0, 0)
	}
	admit(t, c, item("c0", "c", 0), t0, 0)
	require.Equal(t, []string{"a0", "b0", "c0", "a1", "b1", "a2", "a3"}, drain(c))
}

func TestStrictPriorityAcrossBands(t *testing.T) {
	c := started(t, flowcontrol.Config{Bands: []flowcontrol.BandConfig{{Priority: 5}, {Priority: -2}}, DefaultNegativeBand: &flowcontrol.BandConfig{}})
	admit(t, c, item("low0", "t", 0), t0, 0)
	admit(t, c, item("neg", "t", -2), t0, 0)
	admit(t, c, item("high0", "t", 5), t0.Add(time.Second), 0)
	admit(t, c, item("mid", "t", 3), t0.Add(time.Second), 0) // dynamic band from the template
	admit(t, c, item("low1", "u", 0), t0, 0)
	admit(t, c, item("high1", "u", 5), t0.Add(2*time.Second), 0)
	admit(t, c, item("neg9", "t", -9), t0, 0) // from the negative template
	require.Equal(t, []string{"high0", "high1", "mid", "low0", "low1", "neg", "neg9"}, drain(c))
	var prios []int
	for _, b := range c.Stats().Bands {
		prios = append(prios, b.Priority)
	}
	require.Equal(t, []int{5, -2}, prios, "drained dynamic bands are freed; configured ones stay")
}

func TestHeadOfLineBlockingByUsageLimit(t *testing.T) {
	// The high band's ceiling is lower than the low band's: when the high
	// band may not dispatch, nothing lower is released either (GIE).
	limit := ceilings{10: 0.5, 0: 1.0}
	c := started(t, flowcontrol.Config{UsageLimit: limit})
	admit(t, c, item("high", "t", 10), t0, 0)
	admit(t, c, item("low", "t", 0), t0, 0)
	require.Nil(t, c.DispatchOne(0.7, 1))
	it := c.DispatchOne(0.4, 1)
	require.Equal(t, "high", it.RequestID)
	require.Equal(t, "low", c.DispatchOne(0.7, 1).RequestID)
}

type ceilings map[int]float64

func (c ceilings) Ceiling(_ float64, p int) float64 { return c[p] }

func TestCapacityLimits(t *testing.T) {
	c := started(t, flowcontrol.Config{MaxRequests: 3, MaxBytes: 100, Bands: []flowcontrol.BandConfig{{Priority: 1, MaxRequests: 1}, {Priority: 2, MaxBytes: 30}}, MaxBands: 3})
	big := item("big", "f", 0)
	big.Bytes = 101
	o, ok := c.Admit(big, t0, 0)
	require.False(t, ok)
	require.Equal(t, flowcontrol.RejectedQueueFull, o, "larger than maxBytes: refused at once")
	admit(t, c, item("b1", "f", 1), t0, 0)
	o, _ = c.Admit(item("b1x", "f", 1), t0, 0)
	require.Equal(t, flowcontrol.RejectedQueueFull, o, "band maxRequests")
	b2 := item("b2", "f", 2)
	b2.Bytes = 31
	o, _ = c.Admit(b2, t0, 0)
	require.Equal(t, flowcontrol.RejectedQueueFull, o, "band maxBytes")
	admit(t, c, item("b2ok", "f", 2), t0, 0)
	admit(t, c, item("d1", "f", 0), t0, 0)
	o, _ = c.Admit(item("d2", "f", 0), t0, 0)
	require.Equal(t, flowcontrol.RejectedQueueFull, o, "global maxRequests")
	o, _ = c.Admit(item("p9", "f", 9), t0, 0)
	require.Equal(t, flowcontrol.RejectedQueueFull, o, "maxBands")
	s := c.Stats()
	require.Equal(t, uint64(3), s.Requests)
	require.Equal(t, uint64(30), s.Bytes)
	require.Len(t, drain(c), 3)
	require.Zero(t, c.Stats().Bytes)
}

func TestCancelAndExpire(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	c := started(t, flowcontrol.Config{Clock: clk, DefaultRequestTTL: 10 * time.Second, NoEndpointRequestTTL: time.Minute})
	a, b, x := item("a", "f", 0), item("b", "f", 0), item("x", "g", 0)
	admit(t, c, a, t0, 0)
	admit(t, c, b, t0, 0)
	admit(t, c, x, t0, 0)
	require.Equal(t, flowcontrol.Cancelled, c.Cancel(a))
	require.False(t, a.Queued())

	clk.Step(5 * time.Second)
	o, next := c.Expire(b)
	require.Equal(t, 5*time.Second, next, "not yet")
	require.True(t, b.Queued())
	_ = o
	// The pool loses every endpoint: the no-endpoint budget applies.
	require.Nil(t, c.DispatchOne(1, 0))
	clk.Step(5 * time.Second)
	o, next = c.Expire(b)
	require.Equal(t, 50*time.Second, next, "the no-endpoint budget runs from enqueue")
	clk.Step(50 * time.Second)
	o, next = c.Expire(b)
	require.Zero(t, next)
	require.Equal(t, flowcontrol.NoEndpoint, o)
	require.Equal(t, 503, o.StatusCode())
	// Endpoints are back: x's own TTL is spent.
	require.Nil(t, c.DispatchOne(1, 1))
	o, next = c.Expire(x)
	require.Zero(t, next)
	require.Equal(t, flowcontrol.ExpiredTTL, o)
	require.Equal(t, 429, o.StatusCode())
	require.Nil(t, c.DispatchOne(0, 1), "cancelled and expired items are never dispatched")
	require.Zero(t, c.Stats().Requests)
}

func TestReconfigureKeepsWaitingItems(t *testing.T) {
	c := started(t, flowcontrol.Config{MaxRequests: 3})
	require.Equal(t, uint64(3), c.Stats().MaxRequests)
	admit(t, c, item("long", "f", 0), t0, time.Minute)
	admit(t, c, item("short", "f", 0), t0.Add(time.Millisecond), time.Second)
	pol, err := edf.New("edf", edf.DefaultParams(), nil)
	require.NoError(t, err)
	// A reload: EDF ordering, a new band, no request limit.
	require.NoError(t, c.Reconfigure(flowcontrol.Config{DefaultBand: flowcontrol.BandConfig{Ordering: pol}, Bands: []flowcontrol.BandConfig{{Priority: 7, MaxRequests: 1}}}))
	s := c.Stats()
	require.Equal(t, uint64(flowcontrol.HardMaxRequests), s.MaxRequests)
	require.Equal(t, uint64(2), s.Requests, "waiting items stay")
	require.Equal(t, 7, s.Bands[0].Priority)
	admit(t, c, item("p7", "g", 7), t0, 0)
	o, _ := c.Admit(item("p7b", "g", 7), t0, 0)
	require.Equal(t, flowcontrol.RejectedQueueFull, o)
	require.Equal(t, []string{"p7", "short", "long"}, drain(c), "re-ordered by the new policy")
	require.Error(t, c.Reconfigure(flowcontrol.Config{Bands: []flowcontrol.BandConfig{{Priority: 1}, {Priority: 1}}}))
}

func TestFlowStats(t *testing.T) {
	c := started(t, flowcontrol.Config{})
	admit(t, c, item("a1", "a", 0), t0, 0)
	admit(t, c, item("b1", "b", 2), t0, 0)
	admit(t, c, item("a2", "a", 0), t0, 0)
	require.Equal(t, []flowcontrol.FlowStats{
		{Key: flowcontrol.FlowKey{ID: "b", Priority: 2}, Requests: 1, Bytes: 10},
		{Key: flowcontrol.FlowKey{ID: "a", Priority: 0}, Requests: 2, Bytes: 20},
	}, c.FlowStats())
	drain(c)
	require.Empty(t, c.FlowStats(), "empty flows are gone")
}
