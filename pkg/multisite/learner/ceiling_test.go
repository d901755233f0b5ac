package learner

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// idle is a reading with nothing waiting at in-flight running×ready.
func idle(running, ready float64) ld { return ld{running: running, ready: ready} }

// busy is a reading with queue requests per endpoint waiting.
func busy(running, queue, ready float64) ld { return ld{running: running, queue: queue, ready: ready} }

func TestG05_InFlightIsRunningPlusWaitingTimesReadyPlusFlowControl(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0, batch("a", "p", 1, t0, ld{running: 2, queue: 0.5, ready: 4, flow: 3}))
	a := site(t, sn, "a")
	assert.InDelta(t, 13, a.InFlight, 1e-9) // (2 + 0.5) × 4 + 3
	assert.True(t, a.Queued, "2 queued + 3 held is work waiting")
	assert.InDelta(t, 5, a.QueueDepth, 1e-9)
}

func TestG10_SoftBoundIsMostInFlightWithNothingWaiting(t *testing.T) {
	set := DefaultSettings()
	r := newRig(t, set, nil)
	var sn = r.poll(t0, batch("a", "p", 1, t0, idle(5, 2)))
	assert.InDelta(t, 10, site(t, sn, "a").CeilingSoft, 1e-9)
	sn = r.poll(t0.Add(time.Second), batch("a", "p", 1, t0.Add(time.Second), idle(10, 2)))
	assert.InDelta(t, 20, site(t, sn, "a").CeilingSoft, 1e-9)
	// Lower in-flight does not lower it (beyond the slow decay) …
	sn = r.poll(t0.Add(2*time.Second), batch("a", "p", 1, t0.Add(2*time.Second), idle(2, 2)))
	assert.InDelta(t, 20, site(t, sn, "a").CeilingSoft, 0.05)
	assert.Less(t, site(t, sn, "a").CeilingSoft, 20.0, "the soft bound decays")
	// … nor does a higher one with work waiting raise it: that is a limit.
	sn = r.poll(t0.Add(3*time.Second), batch("a", "p", 1, t0.Add(3*time.Second), busy(15, 1, 2)))
	assert.InDelta(t, 20, site(t, sn, "a").CeilingSoft, 0.05)
	// Less than one whole request queued is nothing waiting.
	sn = r.poll(t0.Add(4*time.Second), batch("a", "p", 1, t0.Add(4*time.Second), ld{running: 15, queue: 0.4, ready: 2}))
	assert.InDelta(t, 30.8, site(t, sn, "a").CeilingSoft, 1e-9)
}

func TestG11_HardBoundIsLeastInFlightAtADemonstratedLimit(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0, batch("a", "p", 1, t0, idle(10, 2)))
	assert.True(t, math.IsNaN(site(t, sn, "a").CeilingHard), "no limit seen yet")
	for i, tc := range []struct {
		l    ld
		hard float64
	}{
		{busy(14, 1, 2), 30},                    // 2 queued
		{busy(11, 1, 2), 24},                    // lower: the hard bound follows it down
		{busy(20, 1, 2), 24},                    // higher: stays (beyond a tiny relax)
		{ld{running: 9, flow: 1, ready: 2}, 19}, // held by flow control is waiting too
	} {
		at := t0.Add(time.Duration(i+1) * time.Second)
		sn = r.poll(at, batch("a", "p", 1, at, tc.l))
		assert.InDelta(t, tc.hard, site(t, sn, "a").CeilingHard, 0.05, "case %d", i)
	}
	a := site(t, sn, "a")
	assert.InDelta(t, 19, a.Ceiling, 0.05, "the hard bound caps the soft one (20)")
}

func TestG12_BoundsArePerProviderGeneration(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0, batch("a", "p", 1, t0, idle(20, 2)), batch("a", "q", 7, t0, idle(5, 2)))
	a := site(t, sn, "a")
	assert.InDelta(t, 50, a.CeilingSoft, 1e-9, "two providers of the site learn apart; the site sums them")
	assert.InDelta(t, 50, a.Ceiling, 1e-9)

	// A new generation of p restarts its learning; q keeps its bound.
	at := t0.Add(time.Second)
	sn = r.poll(at, batch("a", "p", 2, at, idle(3, 2)), batch("a", "q", 7, at, idle(1, 2)))
	a = site(t, sn, "a")
	assert.InDelta(t, 16, a.CeilingSoft, 0.01, "p: 6 in its new generation, q: 10")
	assert.InDelta(t, 18, a.Ceiling, 0.01, "p at the floor (8) + q (10)")
}

func TestG12_NoGenerationRowLearningDisabledPressureUsable(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0, batch("a", "p", noGen, t0, ld{running: 20, ready: 2, kv: 0.4}))
	a := site(t, sn, "a")
	assert.True(t, math.IsNaN(a.CeilingSoft) && math.IsNaN(a.Ceiling) && math.IsNaN(a.RhoCounted))
	assert.False(t, a.CapacityKnown)
	assert.InDelta(t, 0.4, a.Rho, 1e-9, "fresh pressure (the reported part) is still usable")
	assert.True(t, a.RhoFresh)
	// The row arrives: learning starts from the next sample.
	at := t0.Add(time.Second)
	sn = r.poll(at, batch("a", "p", 3, at, ld{running: 20, ready: 2, kv: 0.4}))
	assert.InDelta(t, 40, site(t, sn, "a").Ceiling, 1e-9)
}

func TestG13_CeilingIsMaxFloorMinSoftHardWithDecayAndRelax(t *testing.T) {
	set := DefaultSettings()
	r := newRig(t, set, nil)
	sn := r.poll(t0, batch("a", "p", 1, t0, idle(1, 3)))
	assert.InDelta(t, 3, site(t, sn, "a").CeilingSoft, 1e-9)
	assert.InDelta(t, 8, site(t, sn, "a").Ceiling, 1e-9, "never below the floor")

	r = newRig(t, set, nil)
	r.poll(t0, batch("a", "p", 1, t0, idle(20, 2)))
	sn = r.poll(t0, batch("a", "p", 1, t0.Add(time.Millisecond), busy(10, 1, 2)))
	a := site(t, sn, "a")
	assert.InDelta(t, 40, a.CeilingSoft, 0.01)
	assert.InDelta(t, 22, a.CeilingHard, 0.01)
	assert.InDelta(t, 22, a.Ceiling, 0.01, "min(soft, hard)")

	// One half-life later (an idle sample at 0 in flight): the soft bound
	// halved its distance to the floor, the hard bound doubled.
	at := t0.Add(time.Millisecond + 600*time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, idle(0, 2)))
	a = site(t, sn, "a")
	assert.InDelta(t, 8+32.0/2, a.CeilingSoft, 0.01)
	assert.InDelta(t, 44, a.CeilingHard, 0.01)
	assert.InDelta(t, 24, a.Ceiling, 0.01)

	// Many half-lives: soft at the floor, hard far above.
	at = at.Add(20 * 600 * time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, idle(0, 2)))
	a = site(t, sn, "a")
	assert.InDelta(t, 8, a.CeilingSoft, 0.01)
	assert.InDelta(t, 8, a.Ceiling, 0.01)
	assert.Greater(t, a.CeilingHard, 1e6)
}

func TestG14_RhoCountedReportedCombinedSmoothedPerNewSample(t *testing.T) {
	set := DefaultSettings()
	r := newRig(t, set, nil)
	// In flight 4 under the floor ceiling 8: counted 0.5; reported 0.2.
	sn := r.poll(t0, batch("a", "p", 1, t0, ld{running: 2, ready: 2, kv: 0.2}))
	a := site(t, sn, "a")
	assert.InDelta(t, 0.5, a.RhoCounted, 1e-9)
	assert.InDelta(t, 0.2, a.RhoReported, 1e-9)
	assert.InDelta(t, 0.5, a.Rho, 1e-9, "the first sample sets rho (max of the parts)")

	at := t0.Add(time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, ld{running: 1, ready: 2, kv: 0.6}))
	a = site(t, sn, "a")
	assert.InDelta(t, 0.25, a.RhoCounted, 1e-9)
	assert.InDelta(t, 0.5+0.3*(0.6-0.5), a.Rho, 1e-9, "smoothed with weight 0.3")

	// Refreshes that bring no new sample (same stamp; a health tick)
	// leave rho unchanged.
	want := a.Rho
	sn = r.poll(at.Add(500*time.Millisecond), batch("a", "p", 1, at, ld{running: 1, ready: 2, kv: 0.6}))
	assert.InDelta(t, want, site(t, sn, "a").Rho, 1e-12)
	sn = r.step(at.Add(time.Second))
	assert.InDelta(t, want, site(t, sn, "a").Rho, 1e-12)

	// smoothing 1 is no smoothing.
	set.Smoothing = 1
	r = newRig(t, set, nil)
	r.poll(t0, batch("a", "p", 1, t0, ld{running: 2, ready: 2, kv: 0.2}))
	sn = r.poll(at, batch("a", "p", 1, at, ld{running: 1, ready: 2, kv: 0.6}))
	assert.InDelta(t, 0.6, site(t, sn, "a").Rho, 1e-9)
}

func TestG15_RoomIsRetainedRhoBelowOne(t *testing.T) {
	set := DefaultSettings()
	set.Smoothing = 1
	r := newRig(t, set, nil)
	sn := r.poll(t0, batch("a", "p", 1, t0, ld{running: 1, ready: 2, kv: 0.99}))
	a := site(t, sn, "a")
	assert.True(t, a.Room)
	assert.True(t, a.RhoFresh)
	at := t0.Add(time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, ld{running: 1, ready: 2, kv: 1}))
	assert.False(t, site(t, sn, "a").Room, "rho 1 is no room")

	// Room is judged on the retained reading, freshness apart (§2.11 #16).
	r = newRig(t, set, nil)
	r.poll(t0, batch("a", "p", 1, t0, ld{running: 1, ready: 2, kv: 0.3}))
	sn = r.poll(t0.Add(5*time.Second), publishes("a", "p", 1, t0.Add(5*time.Second)))
	a = site(t, sn, "a")
	assert.True(t, a.Room)
	assert.True(t, a.RhoFresh, "5 s is inside the 6 s window")
	sn = r.poll(t0.Add(6*time.Second+time.Millisecond), publishes("a", "p", 1, t0.Add(6*time.Second)))
	a = site(t, sn, "a")
	assert.True(t, a.Room)
	assert.False(t, a.RhoFresh)

	// No reading at all: no room (and no rho).
	sn = newRig(t, set, nil).step(t0)
	a = site(t, sn, "b")
	assert.False(t, a.Room)
	assert.True(t, math.IsNaN(a.Rho))
}

func TestG16_FullAtCeilingWithWorkWaitingForFullAfter(t *testing.T) {
	set := DefaultSettings()
	r := newRig(t, set, nil)
	r.poll(t0, batch("a", "p", 1, t0, idle(5, 2))) // soft 10: ceiling 10
	var sn = r.last
	for i := 1; i <= 6; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		// 12 in flight, one request per endpoint waiting (queue_full 1.0).
		sn = r.poll(at, batch("a", "p", 1, at, busy(5, 1, 2)))
		a := site(t, sn, "a")
		require.InDelta(t, 10, a.Ceiling, 0.05)
		// The run started at t0+1s: full from t0+6s.
		assert.Equal(t, i >= 6, a.Full, "second %d", i)
	}
	// Half a request per endpoint (1 waiting in all): queued, but under
	// queue_full: not at the limit, and full clears at once.
	at := t0.Add(7 * time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, ld{running: 5.5, queue: 0.5, ready: 2}))
	a := site(t, sn, "a")
	assert.True(t, a.Queued)
	assert.False(t, a.Full)

	// A flow-control hold is work waiting for full, whatever the queue.
	set.FullAfterMs = 0
	r = newRig(t, set, nil)
	r.poll(t0, batch("a", "p", 1, t0, idle(5, 2)))
	sn = r.poll(t0.Add(time.Second), batch("a", "p", 1, t0.Add(time.Second), ld{running: 5, ready: 2, flow: 1}))
	assert.True(t, site(t, sn, "a").Full)
	// Below the ceiling with work waiting is not full.
	sn = r.poll(t0.Add(2*time.Second), batch("a", "p", 1, t0.Add(2*time.Second), ld{running: 2, ready: 2, flow: 1}))
	assert.False(t, site(t, sn, "a").Full)
}

func TestG17_WeightIsCeilingLiftedByExploreFloor(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0,
		batch("a", "p", 1, t0, idle(50, 2)), // ceiling 100
		batch("b", "p", 1, t0, idle(5, 2)),  // ceiling 10: lifted to 25
		batch("c", "p", 1, t0, idle(20, 2)), // 40: stays
		rounds("b", t0, 1), rounds("c", t0, 1))
	assert.InDelta(t, 100, site(t, sn, "a").Capacity, 1e-9)
	assert.InDelta(t, 25, site(t, sn, "b").Capacity, 1e-9)
	assert.InDelta(t, 10, site(t, sn, "b").Ceiling, 1e-9, "the ceiling itself is not lifted")
	assert.InDelta(t, 40, site(t, sn, "c").Capacity, 1e-9)

	// An unmeasured site is not lifted, and a site without a ceiling has
	// an unknown capacity (the draw gives it the mean, G-34).
	r = newRig(t, DefaultSettings(), nil)
	sn = r.poll(t0,
		batch("a", "p", 1, t0, idle(50, 2)),
		batch("b", "p", noGen, t0, idle(5, 2)))
	b := site(t, sn, "b")
	assert.False(t, b.CapacityKnown)
	assert.Zero(t, b.Capacity)
}

// The ceiling is the learned providers' only, so "at the ceiling" counts
// their in-flight only, as rho_counted does: a provider without a
// generation row (learning disabled, G-06) does not make the site full.
func TestG16_FullComparesTheLearnedProvidersInFlightWithTheirCeiling(t *testing.T) {
	set := DefaultSettings()
	set.FullAfterMs = 0
	r := newRig(t, set, nil)
	r.poll(t0, batch("a", "p", 1, t0, idle(5, 2))) // p: ceiling 10
	// p at 6 in flight with nothing waiting; q (no generation row) at 12
	// with 2 requests per endpoint waiting: the site's in-flight (18) is
	// over p's ceiling, and work waits (4 over 4 endpoints).
	at := t0.Add(time.Second)
	sn := r.poll(at, batch("a", "p", 1, at, idle(3, 2)), batch("a", "q", noGen, at, busy(4, 2, 2)))
	a := site(t, sn, "a")
	require.InDelta(t, 10, a.Ceiling, 0.05)
	require.InDelta(t, 18, a.InFlight, 1e-9)
	require.InDelta(t, 0.6, a.RhoCounted, 0.01)
	assert.False(t, a.Full, "p is at 60 % of its ceiling")

	// p itself at its ceiling with that work waiting: full.
	at = t0.Add(2 * time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, idle(5, 2)), batch("a", "q", noGen, at, busy(4, 2, 2)))
	a = site(t, sn, "a")
	require.InDelta(t, 1, a.RhoCounted, 0.01)
	assert.True(t, a.Full)
}
