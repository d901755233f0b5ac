package learner

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

var some = ld{running: 1, ready: 2, kv: 0.1}

func TestG20_UnreadySites(t *testing.T) {
	peers := append(defaultPeers(), topology.Site{Name: "d", Cluster: "cd"}) // no gateway
	r := newRig(t, DefaultSettings(), nil, peers...)
	sn := r.poll(t0,
		batch("a", "p", 1, t0, some),
		batch("b", "p", 1, t0, ld{ready: 0}),
		batch("d", "p", 1, t0, some),
		rounds("b", t0, 1), rounds("d", t0, 1))
	assert.True(t, site(t, sn, "a").Ready)
	assert.False(t, site(t, sn, "b").Ready, "0 ready endpoints")
	assert.True(t, site(t, sn, "c").Ready, "no reading yet is not unready (c is a fallback: no telemetry)")
	assert.False(t, site(t, sn, "c").Telemetry)
	assert.False(t, site(t, sn, "d").Ready, "a site the EPP cannot route to (no gateway) is not admitted")
	// The verdict survives silence …
	at := t0.Add(time.Minute)
	sn = r.poll(at, batch("a", "p", 1, at, some), rounds("b", at, 2), rounds("d", at, 2))
	assert.True(t, site(t, sn, "b").Silent)
	assert.False(t, site(t, sn, "b").Ready)
	// … and clears on a newer sample that omits the readiness row.
	at = at.Add(time.Second)
	sn = r.poll(at, []signals.Sample{{Name: signals.NameAverageRunning, Site: "b", Cluster: "cb", Provider: "p", Value: 1, Stamp: at}}, rounds("b", at, 3))
	assert.True(t, site(t, sn, "b").Ready)
	// Two providers: ready while one has an endpoint.
	at = at.Add(time.Second)
	sn = r.poll(at, batch("b", "p", 1, at, ld{ready: 0}), batch("b", "q", 1, at, some), rounds("b", at, 4))
	assert.True(t, site(t, sn, "b").Ready)
	at = at.Add(time.Second)
	sn = r.poll(at, batch("b", "p", 1, at, ld{ready: 0}), batch("b", "q", 1, at, ld{ready: 0}), rounds("b", at, 5))
	assert.False(t, site(t, sn, "b").Ready)
}

func TestG40_SilentAfterFreshnessWindow(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	r.poll(t0, batch("a", "p", 1, t0, some), batch("b", "p", 1, t0, some), rounds("b", t0, 1))
	// The local site is judged at the Date of the last read, the peer at
	// its round end; the relay keeps sending publishes_load, which is no
	// sample.
	at := t0.Add(6 * time.Second)
	sn := r.poll(at, publishes("a", "p", 1, at), publishes("b", "p", 1, at), rounds("b", at, 4))
	assert.False(t, site(t, sn, "a").Silent, "exactly the window is not silent")
	assert.False(t, site(t, sn, "b").Silent)
	at = at.Add(time.Millisecond)
	sn = r.poll(at, publishes("a", "p", 1, at), publishes("b", "p", 1, at), rounds("b", at, 5))
	assert.True(t, site(t, sn, "a").Silent)
	assert.True(t, site(t, sn, "b").Silent)
	assert.False(t, site(t, sn, "a").RhoFresh)
	assert.False(t, site(t, sn, "c").Silent, "c never published")

	// The window is a setting.
	set := DefaultSettings()
	set.FreshnessWindowMs = 1000
	r = newRig(t, set, nil)
	r.poll(t0, batch("a", "p", 1, t0, some))
	sn = r.poll(t0.Add(1001*time.Millisecond), publishes("a", "p", 1, t0.Add(time.Second)))
	assert.True(t, site(t, sn, "a").Silent)
}

func TestG41_JudgementPausesWhenThePollOrRelayStalls(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	r.poll(t0, batch("a", "p", 1, t0, some), batch("b", "p", 1, t0, some), rounds("b", t0, 1))
	// Polls fail: health ticks run the step on the EPP's clock, but the
	// last read's Date does not move, so nothing goes silent.
	for i := 1; i <= 60; i++ {
		sn := r.step(t0.Add(time.Duration(i) * time.Second))
		assert.False(t, site(t, sn, "a").Silent)
		assert.False(t, site(t, sn, "b").Silent)
	}
	// The relay's poller stalls: its round end for b stays at t0 while
	// the local site keeps publishing; b is not judged silent.
	for i := 1; i <= 20; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		sn := r.poll(at, batch("a", "p", 1, at, some), rounds("b", t0, 1))
		assert.False(t, site(t, sn, "b").Silent, "second %d", i)
		assert.False(t, site(t, sn, "a").Silent)
	}
	// Its rounds resume and find nothing new: b is silent.
	at := t0.Add(21 * time.Second)
	sn := r.poll(at, batch("a", "p", 1, at, some), rounds("b", at, 2))
	assert.True(t, site(t, sn, "b").Silent)
}

func TestG42_PeerWithoutPollRoundsIsNotJudged(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	r.poll(t0, batch("a", "p", 1, t0, some), batch("b", "p", 1, t0, some))
	at := t0.Add(time.Minute)
	sn := r.poll(at, batch("a", "p", 1, at, some))
	assert.False(t, site(t, sn, "b").Silent)
	assert.False(t, site(t, sn, "b").RhoFresh, "its rho is old all the same (read at the last Date)")
}

func TestG44_SilenceClearsAfterTwoSamplesWithNoFullWindowBetween(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	r.poll(t0, batch("b", "p", 1, t0, some), rounds("b", t0, 1))
	sn := r.poll(t0.Add(7*time.Second), rounds("b", t0.Add(7*time.Second), 2))
	assert.True(t, site(t, sn, "b").Silent)

	// One sample through a lossy link is not enough …
	at := t0.Add(8 * time.Second)
	sn = r.poll(at, batch("b", "p", 1, at, some), rounds("b", at, 3))
	assert.True(t, site(t, sn, "b").Silent, "one new sample")
	// … nor is the same sample read again …
	sn = r.poll(at.Add(500*time.Millisecond), batch("b", "p", 1, at, some), rounds("b", at.Add(500*time.Millisecond), 4))
	assert.True(t, site(t, sn, "b").Silent, "a duplicate stamp")
	// … a second new one inside the window is.
	at = t0.Add(9 * time.Second)
	sn = r.poll(at, batch("b", "p", 1, at, some), rounds("b", at, 5))
	assert.False(t, site(t, sn, "b").Silent)
	assert.True(t, site(t, sn, "b").RhoFresh)

	// A full window between the two samples starts the count again.
	at = at.Add(7 * time.Second)
	sn = r.poll(at, rounds("b", at, 6))
	assert.True(t, site(t, sn, "b").Silent)
	at = at.Add(time.Second)
	r.poll(at, batch("b", "p", 1, at, some), rounds("b", at, 7)) // streak 1
	at = at.Add(7 * time.Second)
	sn = r.poll(at, batch("b", "p", 1, at, some), rounds("b", at, 8)) // 7 s later: streak 1 again
	assert.True(t, site(t, sn, "b").Silent, "a full window between the samples")
	at = at.Add(2 * time.Second)
	sn = r.poll(at, batch("b", "p", 1, at, some), rounds("b", at, 9))
	assert.False(t, site(t, sn, "b").Silent)
}

func TestG45_EverySiteSilentIsMarkedForTheFallback(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	r.poll(t0, batch("a", "p", 1, t0, some), batch("b", "p", 1, t0, some), batch("c", "p", 1, t0, some),
		rounds("b", t0, 1), rounds("c", t0, 1))
	at := t0.Add(10 * time.Second)
	sn := r.poll(at, rounds("b", at, 2), rounds("c", at, 2))
	for _, s := range sn.Sites {
		assert.True(t, s.Silent, s.Name)
		assert.True(t, s.Telemetry && s.Ready, "the site stage keeps them when all are silent (G-45)")
		assert.False(t, s.RhoFresh, s.Name)
	}
}

func TestG46_LoadPublishingPeerWithoutRowsThroughAWindowOfRoundsIsSilent(t *testing.T) {
	// A gateway that starts during a partition: the relay says b
	// publishes load but has no load rows of it.
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0, batch("a", "p", 1, t0, some), publishes("b", "p", 1, t0), publishes("c", "p", 0, t0),
		rounds("b", t0, 40), rounds("c", t0, 40))
	assert.False(t, site(t, sn, "b").Silent)
	at := t0.Add(6 * time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, some), publishes("b", "p", 1, at), publishes("c", "p", 0, at),
		rounds("b", at, 43), rounds("c", at, 43))
	assert.False(t, site(t, sn, "b").Silent, "a window of rounds has not passed")
	at = at.Add(time.Millisecond)
	sn = r.poll(at, batch("a", "p", 1, at, some), publishes("b", "p", 1, at), publishes("c", "p", 0, at),
		rounds("b", at, 44), rounds("c", at, 44))
	b := site(t, sn, "b")
	assert.True(t, b.Silent)
	assert.False(t, b.Telemetry)
	assert.True(t, b.PublishesLoad)
	assert.False(t, site(t, sn, "c").Silent, "c does not publish load: unmeasured, not silent")
	// It returns with two samples, like any silent site.
	for i, want := range []bool{true, false} {
		at = at.Add(time.Second)
		sn = r.poll(at, batch("b", "p", 1, at, some), rounds("b", at, float64(45+i)))
		assert.Equal(t, want, site(t, sn, "b").Silent, "sample %d", i+1)
	}
}

func TestG47_WhichCandidatesPublishLoad(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0,
		batch("a", "p", 1, t0, some),           // publishes_load 1
		publishes("b", "p", 0, t0),             // a peer's provider with no load rows since the relay started
		rounds("b", t0, 1), rounds("c", t0, 1)) // c: no provider at all
	assert.True(t, site(t, sn, "a").PublishesLoad)
	assert.False(t, site(t, sn, "b").PublishesLoad)
	assert.False(t, site(t, sn, "c").PublishesLoad)

	// The local provider without metrics to scrape: 0.
	r = newRig(t, DefaultSettings(), nil)
	sn = r.poll(t0, publishes("a", "p", 0, t0))
	assert.False(t, site(t, sn, "a").PublishesLoad)
	assert.False(t, site(t, sn, "a").Silent)
}

func TestG48_UnmeasuredCandidateIsMarkedAndNotLifted(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0, batch("a", "p", 1, t0, idle(50, 2)), publishes("b", "p", 0, t0), rounds("b", t0, 1))
	b := site(t, sn, "b")
	assert.False(t, b.PublishesLoad)
	assert.False(t, b.CapacityKnown, "no overflow weight for an unmeasured site")
	assert.False(t, b.Silent)
}

func TestG49_RelayRestartMakesPartitionedSiteUnmeasuredUntilItReturns(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	sn := r.poll(t0, batch("a", "p", 1, t0, some), batch("b", "p", 1, t0, some), rounds("b", t0, 1))
	assert.True(t, site(t, sn, "b").PublishesLoad)
	// The relay restarts during b's partition: it has no load rows of b
	// since it started, so it sends no publishes_load 1 for it.
	at := t0.Add(2 * time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, some), publishes("b", "p", 0, at), rounds("b", at, 1))
	assert.False(t, site(t, sn, "b").PublishesLoad)
	at = at.Add(time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, some), rounds("b", at, 2))
	assert.False(t, site(t, sn, "b").PublishesLoad, "no row: still unmeasured")
	// b returns.
	at = at.Add(time.Second)
	sn = r.poll(at, batch("a", "p", 1, at, some), batch("b", "p", 1, at, some), rounds("b", at, 3))
	assert.True(t, site(t, sn, "b").PublishesLoad)
}

func TestG50_FailingScrapeStillPublishesLoadAndGoesSilent(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	r.poll(t0, batch("a", "p", 1, t0, some))
	// The scrape fails: the relay keeps stating publishes_load 1, with no
	// new load rows.
	var a = site(t, r.last, "a")
	for i := 1; i <= 7; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		a = site(t, r.poll(at, publishes("a", "p", 1, at)), "a")
	}
	assert.True(t, a.PublishesLoad)
	assert.True(t, a.Silent)
}

func TestG51_KnownIssuePeerWithNoLoadRowsIsTheFallbackWhenPublishersAreSilent(t *testing.T) {
	r := newRig(t, DefaultSettings(), nil)
	r.poll(t0, batch("a", "p", 1, t0, some), batch("b", "p", 1, t0, some), publishes("c", "p", 0, t0),
		rounds("b", t0, 1), rounds("c", t0, 1))
	at := t0.Add(10 * time.Second)
	sn := r.poll(at, publishes("a", "p", 1, at), publishes("b", "p", 1, at), publishes("c", "p", 0, at),
		rounds("b", at, 2), rounds("c", at, 2))
	assert.True(t, site(t, sn, "a").Silent)
	assert.True(t, site(t, sn, "b").Silent)
	c := site(t, sn, "c")
	// c cannot be told from a provider the relay cannot scrape: it is
	// live, ready, without telemetry and unmeasured, which the site stage
	// takes as the fallback that gets every pick (reason="fallback").
	assert.False(t, c.Silent)
	assert.True(t, c.Ready)
	assert.False(t, c.Telemetry)
	assert.False(t, c.PublishesLoad)
}

func TestG55_SignalsAndHealthAreJudgedApart(t *testing.T) {
	h := fakeHealth{"b": true}
	r := newRig(t, DefaultSettings(), h)
	r.poll(t0, batch("b", "p", 1, t0, some), rounds("b", t0, 1))
	at := t0.Add(10 * time.Second)
	sn := r.poll(at, rounds("b", at, 2))
	b := site(t, sn, "b")
	assert.True(t, b.Silent && b.Demoted)
	// Signals return first: b is live but still demoted.
	for i := 0; i < 2; i++ {
		at = at.Add(time.Second)
		sn = r.poll(at, batch("b", "p", 1, at, some), rounds("b", at, float64(3+i)))
	}
	b = site(t, sn, "b")
	assert.False(t, b.Silent)
	assert.True(t, b.Demoted)
	// Health passes (on a tick): b is back on both.
	h["b"] = false
	b = site(t, r.step(at), "b")
	assert.False(t, b.Silent || b.Demoted)
	// The local site is never demoted by probes.
	h["a"] = true
	assert.False(t, site(t, r.step(at), "a").Demoted)
	// A nil Health demotes nothing.
	r = newRig(t, DefaultSettings(), nil)
	assert.False(t, site(t, r.step(at), "b").Demoted)
}
