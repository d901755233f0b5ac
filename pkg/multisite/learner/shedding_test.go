package learner

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

// modelPeers: a serves m1 and m2, b serves m1, c serves m2.
func modelPeers() []topology.Site {
	return []topology.Site{
		{Name: "a", Models: []string{"m1", "m2"}},
		{Name: "b", Cluster: "cb", Gateway: "127.0.0.2:8443", Models: []string{"m1"}},
		{Name: "c", Cluster: "cc", Gateway: "127.0.0.3:8443", Models: []string{"m2"}},
	}
}

func shedding() Settings {
	s := DefaultSettings()
	s.Shedding = true
	return s
}

// atLimit is 12 in flight over a ceiling of 10 with one request per
// endpoint waiting; under is 8 in flight with nothing waiting; drained
// has an empty queue.
var (
	atLimit = busy(5, 1, 2)
	under   = ld{running: 4, queue: 0.5, ready: 2} // 1 request waiting, under queue_full
	drained = idle(1, 2)
)

// run feeds every site of loads one sample a second from second from to
// second to (inclusive), with b's and c's rounds, and returns the last
// snapshot.
func run(r *rig, from, to int, loads map[string]ld) *sitestate.Snapshot {
	var sn *sitestate.Snapshot
	for i := from; i <= to; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		var parts [][]signals.Sample
		for _, name := range []string{"a", "b", "c"} {
			if l, ok := loads[name]; ok {
				parts = append(parts, batch(name, "p", 1, at, l))
			} else {
				// No new load: the relay still states that the provider
				// publishes load.
				parts = append(parts, publishes(name, "p", 1, at))
			}
		}
		parts = append(parts, rounds("b", at, float64(i+1)), rounds("c", at, float64(i+1)))
		sn = r.poll(at, parts...)
	}
	return sn
}

// learn gives every site a ceiling of 10 at second 0.
func learn(r *rig) {
	run(r, 0, 0, map[string]ld{"a": idle(5, 2), "b": idle(5, 2), "c": idle(5, 2)})
}

func TestG60_SheddingIsOffByDefault(t *testing.T) {
	assert.False(t, DefaultSettings().Shedding)
	r := newRig(t, DefaultSettings(), nil, modelPeers()...)
	learn(r)
	sn := run(r, 1, 20, map[string]ld{"a": atLimit, "b": atLimit, "c": atLimit})
	for _, s := range sn.Sites {
		require.True(t, s.Full, s.Name)
	}
	assert.Empty(t, sn.Shed)
	assert.False(t, sn.Shedding("m1"))
}

func TestG61_ShedOnceEveryCountedSiteServingTheModelIsFull(t *testing.T) {
	r := newRig(t, shedding(), nil, modelPeers()...)
	learn(r)
	sn := run(r, 1, 5, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	assert.Empty(t, sn.Shed, "at the limit for 4 s: not full yet")
	sn = run(r, 6, 6, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	assert.Equal(t, []string{"m1"}, sn.Shed, "a and b (all m1 sites) full for 5 s; c has room, so m2 routes")
	assert.True(t, sn.Shedding("m1"))
	assert.False(t, sn.Shedding("m2"))
	assert.Equal(t, []string{"m1", "m2"}, sn.Known)
	assert.False(t, sn.AnyModel)

	// Only healthy sites count: c demoted, m2 sheds on a alone.
	h := fakeHealth{"c": true}
	r = newRig(t, shedding(), h, modelPeers()...)
	learn(r)
	sn = run(r, 1, 6, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	assert.Equal(t, []string{"m1", "m2"}, sn.Shed)

	// A site that is not ready does not count either …
	r = newRig(t, shedding(), nil, modelPeers()...)
	learn(r)
	sn = run(r, 1, 6, map[string]ld{"a": atLimit, "b": atLimit, "c": {ready: 0}})
	assert.Equal(t, []string{"m1", "m2"}, sn.Shed)

	// … and with no counted site at all, nothing is shed (503 or a
	// fallback is the site stage's, not a 429).
	r = newRig(t, shedding(), fakeHealth{"b": true}, modelPeers()...)
	learn(r)
	sn = run(r, 1, 6, map[string]ld{"a": {ready: 0}, "b": atLimit, "c": drained})
	assert.NotContains(t, sn.Shed, "m1")
}

func TestG43_SheddingDoesNotWaitForASilentSite(t *testing.T) {
	r := newRig(t, shedding(), nil, modelPeers()...)
	learn(r)
	// b stops sending at second 0 and is silent from second 7.
	sn := run(r, 1, 6, map[string]ld{"a": atLimit, "c": drained})
	require.False(t, site(t, sn, "b").Silent)
	assert.Empty(t, sn.Shed, "b (live, not full) holds m1")
	sn = run(r, 7, 7, map[string]ld{"a": atLimit, "c": drained})
	require.True(t, site(t, sn, "b").Silent)
	assert.Equal(t, []string{"m1"}, sn.Shed)
}

func TestG48_UnmeasuredSiteNeverHoldsOffShedding(t *testing.T) {
	r := newRig(t, shedding(), nil, modelPeers()...)
	learn(r)
	var sn *sitestate.Snapshot
	for i := 1; i <= 6; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		sn = r.poll(at, batch("a", "p", 1, at, atLimit), batch("c", "p", 1, at, drained),
			publishes("b", "p", 0, at), rounds("b", at, float64(i)), rounds("c", at, float64(i)))
	}
	b := site(t, sn, "b")
	require.False(t, b.PublishesLoad)
	require.False(t, b.Silent)
	assert.Equal(t, []string{"m1"}, sn.Shed)
}

func TestG62_RoutesAgainAfterRoomAfterWithHysteresis(t *testing.T) {
	r := newRig(t, shedding(), nil, modelPeers()...)
	learn(r)
	sn := run(r, 1, 6, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	require.Equal(t, []string{"m1"}, sn.Shed)
	// b leaves the limit but work still waits: neither full nor room yet;
	// the previous state is kept until room_after_ms (2 s) after its last
	// sample at the limit (second 6).
	sn = run(r, 7, 7, map[string]ld{"a": atLimit, "b": under, "c": drained})
	require.False(t, site(t, sn, "b").Full)
	require.True(t, site(t, sn, "b").Queued)
	assert.Equal(t, []string{"m1"}, sn.Shed, "1 s after the last limit sample")
	sn = run(r, 8, 8, map[string]ld{"a": atLimit, "b": under, "c": drained})
	assert.Empty(t, sn.Shed, "2 s: routes again")
	// And a is still full: m1 does not shed again until every site is.
	sn = run(r, 9, 13, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	assert.Empty(t, sn.Shed, "b at the limit for 4 s")
	sn = run(r, 14, 14, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	assert.Equal(t, []string{"m1"}, sn.Shed)

	// An emptied queue counts as room at once.
	sn = run(r, 15, 15, map[string]ld{"a": atLimit, "b": drained, "c": drained})
	assert.Empty(t, sn.Shed)

	// A site back at the limit does not unshed a model (hysteresis the
	// other way): shed, then one sample of b under the limit for less
	// than room_after keeps it shed.
	set := shedding()
	set.RoomAfterMs = 5000
	r = newRig(t, set, nil, modelPeers()...)
	learn(r)
	run(r, 1, 6, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	// Not before room_after_ms: every step up to 4 s after b's last
	// sample at the limit (second 6) keeps m1 shed …
	for i := 7; i <= 10; i++ {
		sn = run(r, i, i, map[string]ld{"a": atLimit, "b": under, "c": drained})
		require.False(t, site(t, sn, "b").Full, "second %d", i)
		assert.Equal(t, []string{"m1"}, sn.Shed, "second %d: %d s after the last limit sample", i, i-6)
	}
	// … and a control step between samples (no new sample) does not
	// move the room clock either.
	sn = r.step(t0.Add(10*time.Second + 900*time.Millisecond))
	assert.Equal(t, []string{"m1"}, sn.Shed, "4.9 s on the EPP's clock, 4 s on the samples'")
	sn = run(r, 11, 11, map[string]ld{"a": atLimit, "b": under, "c": drained})
	assert.Empty(t, sn.Shed, "5 s: routes again")
}

func TestG62_ModelsServedByEverySiteShedAsOthers(t *testing.T) {
	r := newRig(t, shedding(), nil) // no site names a model
	learn(r)
	sn := run(r, 1, 6, map[string]ld{"a": atLimit, "b": atLimit, "c": atLimit})
	assert.True(t, sn.AnyModel)
	assert.True(t, sn.ShedOthers)
	assert.True(t, sn.Shedding("any"))
	sn = run(r, 7, 7, map[string]ld{"a": atLimit, "b": drained, "c": atLimit})
	assert.False(t, sn.ShedOthers)
}

// A queue_full under one request per endpoint (validation allows it) puts
// a site at the limit with less than one whole request waiting; that is
// not an emptied queue, so the model stays shed while every site stays at
// the limit (no flip every control step).
func TestG62_FractionalQueueFullAtTheLimitIsNotAnEmptiedQueue(t *testing.T) {
	set := shedding()
	set.QueueFull = 0.5
	r := newRig(t, set, nil, modelPeers()...)
	// Ceiling 10 on every site (one endpoint each).
	run(r, 0, 0, map[string]ld{"a": idle(10, 1), "b": idle(10, 1), "c": idle(10, 1)})
	// 0.6 of a request waiting on the one endpoint: ≥ queue_full 0.5 at
	// 10.6 in flight over the ceiling, but less than a whole request.
	limit := ld{running: 10, queue: 0.6, ready: 1}
	loads := map[string]ld{"a": limit, "b": limit, "c": limit}
	sn := run(r, 1, 6, loads)
	for _, s := range sn.Sites {
		require.True(t, s.Full, s.Name)
		require.False(t, s.Queued, s.Name)
	}
	require.Equal(t, []string{"m1", "m2"}, sn.Shed)
	for i := 7; i <= 12; i++ {
		sn = run(r, i, i, loads)
		assert.Equal(t, []string{"m1", "m2"}, sn.Shed, "second %d: every site still at the limit", i)
	}
	// A truly emptied queue still counts as room at once.
	sn = run(r, 13, 13, map[string]ld{"a": limit, "b": idle(9, 1), "c": limit})
	assert.Equal(t, []string{"m2"}, sn.Shed, "b emptied: m1 routes again, m2 (a and c) stays shed")
}
