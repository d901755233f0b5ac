package sitestore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

var (
	local = topology.Local{Site: "site-a", Cluster: "cluster-a"}
	date  = time.UnixMilli(1_767_225_600_000)
)

func threeSites(t testing.TB) *topology.Topology {
	t.Helper()
	file := []topology.Site{
		{Name: "site-b", Cluster: "cluster-b", Gateway: "gw-b:443"},
		{Name: "site-c", Cluster: "cluster-c", Gateway: "gw-c:443"},
	}
	top, skipped := topology.Build(local, file, nil)
	require.Empty(t, skipped)
	return top
}

func prov(name, site, cluster, provider string, v float64, stamp time.Time) signals.Sample {
	return signals.Sample{Name: name, Site: site, Cluster: cluster, Provider: provider, Value: v, Stamp: stamp}
}

// batch is one qualified batch of a provider, as a relay sends it.
func batch(site, cluster, provider string, gen float64, stamp time.Time, running float64) []signals.Sample {
	return []signals.Sample{
		prov(signals.NameConfigGeneration, site, cluster, provider, gen, stamp),
		prov(signals.NamePublishesLoad, site, cluster, provider, 1, stamp),
		prov(signals.NameAverageRunning, site, cluster, provider, running, stamp),
		prov(signals.NameAverageQueue, site, cluster, provider, 0.5, stamp),
		prov(signals.NameReadyEndpoints, site, cluster, provider, 3, stamp),
		prov(signals.NameFlowControlQueue, site, cluster, provider, 0, stamp),
		prov(signals.NameAverageKVCache, site, cluster, provider, 0.25, stamp),
	}
}

func rounds(site string, end time.Time, n float64, stamp time.Time) []signals.Sample {
	return []signals.Sample{
		{Name: signals.NamePeerRoundEnd, Site: site, Value: float64(end.UnixMilli()) / 1000, Stamp: stamp},
		{Name: signals.NamePeerRounds, Site: site, Value: n, Stamp: stamp},
	}
}

func concat(parts ...[]signals.Sample) []signals.Sample {
	var out []signals.Sample
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestIngest(t *testing.T) {
	s := New(threeSites(t))
	sn0 := s.Snapshot()
	require.Len(t, sn0.Sites(), 3)
	assert.True(t, sn0.ReadAt.IsZero())
	for _, site := range sn0.Sites() {
		assert.Empty(t, site.Providers)
		assert.False(t, site.RoundsKnown, "no poll rounds reported: not judged (G-42)")
	}

	readAt := time.Now()
	res := s.Ingest(concat(
		batch("site-a", "cluster-a", "pool-b", 7, date.Add(-time.Second), 4),
		batch("site-a", "cluster-a", "pool-a", 7, date.Add(-time.Second), 2),
		rounds("site-b", date.Add(-500*time.Millisecond), 12, date.Add(-400*time.Millisecond)),
		batch("site-b", "cluster-b", "pool", 9, date.Add(-2*time.Second), 1),
	), date, readAt)
	assert.Equal(t, IngestResult{}, res)
	sn := s.Snapshot()
	assert.Greater(t, sn.Version, sn0.Version)
	assert.Equal(t, readAt, sn.ReadAt)
	assert.Equal(t, date, sn.Date)
	assert.Equal(t, uint64(1), sn.Ingests)

	a, ok := sn.Site("site-a")
	require.True(t, ok)
	assert.True(t, a.Local)
	require.Len(t, a.Providers, 2)
	assert.Equal(t, "pool-a", a.Providers[0].Name, "sorted by name")
	p, ok := a.Provider("pool-b")
	require.True(t, ok)
	assert.Equal(t, Reading{Value: 4, Stamp: date.Add(-time.Second)}, p.Running)
	assert.Equal(t, 0.25, p.KVCache.Value)
	assert.Equal(t, 3.0, p.Ready.Value)
	assert.True(t, p.PublishesLoadKnown())
	g, ok := p.GenerationValue()
	assert.True(t, ok)
	assert.Equal(t, uint64(7), g)
	assert.Equal(t, "cluster-a", p.Cluster)
	assert.Equal(t, date.Add(-time.Second), a.Stamp)

	b, _ := sn.Site("site-b")
	assert.True(t, b.RoundsKnown)
	assert.Equal(t, uint64(12), b.Rounds)
	assert.True(t, b.RoundEnd.Equal(date.Add(-500*time.Millisecond)), "round end %s", b.RoundEnd)
	assert.Equal(t, date.Add(-400*time.Millisecond), b.RoundEndStamp)
	c, _ := sn.Site("site-c")
	assert.Empty(t, c.Providers)

	// The old snapshot did not change.
	a0, _ := sn0.Site("site-a")
	assert.Empty(t, a0.Providers)

	// A second read that brings load rows for site-b only: site-a, whose
	// publishes_load rows come unchanged, keeps its rows (and shares them
	// with the previous snapshot), older rows do not replace newer ones.
	res = s.Ingest(concat(
		[]signals.Sample{
			prov(signals.NamePublishesLoad, "site-a", "cluster-a", "pool-a", 1, date.Add(-time.Second)),
			prov(signals.NamePublishesLoad, "site-a", "cluster-a", "pool-b", 1, date.Add(-time.Second)),
		},
		[]signals.Sample{prov(signals.NameAverageRunning, "site-b", "cluster-b", "pool", 5, date.Add(-time.Second))},
		[]signals.Sample{prov(signals.NameAverageQueue, "site-b", "cluster-b", "pool", 99, date.Add(-3*time.Second))},
	), date.Add(time.Second), readAt.Add(time.Second))
	assert.Equal(t, IngestResult{}, res)
	sn2 := s.Snapshot()
	a2, _ := sn2.Site("site-a")
	assert.Same(t, &a.Providers[0], &a2.Providers[0], "an unchanged site is shared")
	b2, _ := sn2.Site("site-b")
	bp, _ := b2.Provider("pool")
	assert.Equal(t, 5.0, bp.Running.Value)
	assert.Equal(t, 0.5, bp.Queue.Value, "an older row does not replace a newer one")
	assert.Equal(t, date.Add(-time.Second), bp.Stamp)
	assert.False(t, bp.PublishesLoadKnown(), "the read carried no publishes_load row for it")
	assert.Equal(t, uint64(12), b2.Rounds, "rows left out keep their last value")
}

// TestStampFromLoadRowsOnly: a provider's load freshness (Stamp) follows
// its pool load readings only; publishes_load rows (stamped at every relay
// response) and generation rows advance LastHeard, not Stamp, so a
// provider whose load rows stopped does not look fresh.
func TestStampFromLoadRowsOnly(t *testing.T) {
	s := New(threeSites(t))
	t0 := date
	s.Ingest(batch("site-b", "cluster-b", "pool", 1, t0, 2), t0, time.Now())
	for i := 1; i <= 3; i++ {
		ti := t0.Add(time.Duration(i) * time.Second)
		s.Ingest([]signals.Sample{
			prov(signals.NameConfigGeneration, "site-b", "cluster-b", "pool", 1, ti),
			prov(signals.NamePublishesLoad, "site-b", "cluster-b", "pool", 1, ti),
		}, ti, time.Now())
	}
	b, _ := s.Snapshot().Site("site-b")
	p, ok := b.Provider("pool")
	require.True(t, ok)
	assert.Equal(t, t0, p.Stamp, "the load freshness is the last load row's")
	assert.Equal(t, t0.Add(3*time.Second), p.LastHeard)
	assert.Equal(t, t0.Add(3*time.Second), b.Stamp, "the site's newest row")
	assert.True(t, p.PublishesLoadKnown())

	// One load row moves Stamp.
	t4 := t0.Add(4 * time.Second)
	s.Ingest([]signals.Sample{
		prov(signals.NamePublishesLoad, "site-b", "cluster-b", "pool", 1, t4),
		prov(signals.NameReadyEndpoints, "site-b", "cluster-b", "pool", 2, t4),
	}, t4, time.Now())
	b, _ = s.Snapshot().Site("site-b")
	p, _ = b.Provider("pool")
	assert.Equal(t, t4, p.Stamp)

	// A new generation clears the older load readings: Stamp follows what
	// is left (none here).
	t5 := t0.Add(5 * time.Second)
	s.Ingest([]signals.Sample{
		prov(signals.NameConfigGeneration, "site-b", "cluster-b", "pool", 2, t5),
		prov(signals.NamePublishesLoad, "site-b", "cluster-b", "pool", 1, t5),
	}, t5, time.Now())
	b, _ = s.Snapshot().Site("site-b")
	p, _ = b.Provider("pool")
	assert.True(t, p.Stamp.IsZero(), "no load reading of the new generation: %s", p.Stamp)
	assert.Equal(t, t5, p.LastHeard)

	// A provider still mentioned (publishes_load) is not expired, however
	// old its load.
	late := t0.Add(MaxAge + time.Hour)
	res := s.Ingest([]signals.Sample{prov(signals.NamePublishesLoad, "site-b", "cluster-b", "pool", 1, late)}, late, time.Now())
	assert.Zero(t, res.Expired)
}

// TestReadyZeroDoesNotAdvanceStamp: the relay's G-08 row (ready
// endpoints 0, sent alone once a failing scrape's readiness is no longer
// kept) replaces the Ready reading but leaves the load freshness at the
// other readings' stamp, so running, queue and KV do not look fresh; a
// reading of 0 that comes with the other load rows of a scrape moves it
// with them, and a later non-zero Ready moves it again.
func TestReadyZeroDoesNotAdvanceStamp(t *testing.T) {
	s := New(threeSites(t))
	t0 := date
	s.Ingest(batch("site-b", "cluster-b", "pool", 1, t0, 2), t0, time.Now())
	get := func() Provider {
		t.Helper()
		b, _ := s.Snapshot().Site("site-b")
		p, ok := b.Provider("pool")
		require.True(t, ok)
		return *p
	}
	end := t0.Add(30 * time.Second)
	for i := range 3 {
		ti := end.Add(time.Duration(i) * time.Second)
		s.Ingest([]signals.Sample{
			prov(signals.NamePublishesLoad, "site-b", "cluster-b", "pool", 1, ti),
			prov(signals.NameReadyEndpoints, "site-b", "cluster-b", "pool", 0, end),
		}, ti, time.Now())
		p := get()
		assert.Equal(t, Reading{Value: 0, Stamp: end}, p.Ready)
		assert.Equal(t, t0, p.Stamp, "the load is as old as it was")
		assert.Equal(t, ti, p.LastHeard)
	}

	// A scrape that reads 0 ready endpoints with the rest: fresh.
	t1 := end.Add(time.Minute)
	rows := batch("site-b", "cluster-b", "pool", 1, t1, 0)
	for i := range rows {
		if rows[i].Name == signals.NameReadyEndpoints {
			rows[i].Value = 0
		}
	}
	s.Ingest(rows, t1, time.Now())
	assert.Equal(t, t1, get().Stamp)

	// A Ready reading other than 0 counts, even alone.
	t2 := t1.Add(time.Second)
	s.Ingest([]signals.Sample{prov(signals.NameReadyEndpoints, "site-b", "cluster-b", "pool", 1, t2)}, t2, time.Now())
	assert.Equal(t, t2, get().Stamp)
	// And a 0 replacing it takes its stamp back out.
	t3 := t2.Add(time.Second)
	s.Ingest([]signals.Sample{prov(signals.NameReadyEndpoints, "site-b", "cluster-b", "pool", 0, t3)}, t3, time.Now())
	assert.Equal(t, t1, get().Stamp)
}

// TestIngestSiteMismatch: rows of a site the topology does not know, or
// of a cluster that is not the site's, are refused (G-02/G-03, EPP side).
func TestIngestSiteMismatch(t *testing.T) {
	s := New(threeSites(t))
	res := s.Ingest(concat(
		batch("site-z", "cluster-z", "pool", 1, date, 1),
		rounds("site-z", date, 1, date),
		batch("site-b", "cluster-x", "pool", 1, date, 1),
		batch("site-b", "cluster-b", "pool", 1, date, 1),
	), date, time.Now())
	assert.Equal(t, IngestResult{SiteMismatch: 7 + 2 + 7}, res)
	sn := s.Snapshot()
	_, ok := sn.Site("site-z")
	assert.False(t, ok)
	b, _ := sn.Site("site-b")
	assert.Len(t, b.Providers, 1)
}

// TestIngestCap: a site holds at most MaxProvidersPerSite providers.
func TestIngestCap(t *testing.T) {
	s := New(threeSites(t))
	var rows []signals.Sample
	for i := range MaxProvidersPerSite + 2 {
		rows = append(rows, prov(signals.NameAverageRunning, "site-c", "cluster-c", fmt.Sprintf("pool-%03d", i), 1, date))
	}
	rows = append(rows, prov(signals.NameAverageQueue, "site-c", "cluster-c", "pool-000", 2, date))
	res := s.Ingest(rows, date, time.Now())
	assert.Equal(t, IngestResult{Cap: 2}, res)
	c, _ := s.Snapshot().Site("site-c")
	assert.Len(t, c.Providers, MaxProvidersPerSite)
	p, _ := c.Provider("pool-000")
	assert.Equal(t, 2.0, p.Queue.Value, "a kept provider still takes rows")
}

// TestGeneration: a new generation clears the readings of the old one; a
// row stamped before the generation started is refused.
func TestGeneration(t *testing.T) {
	s := New(threeSites(t))
	s.Ingest(batch("site-b", "cluster-b", "pool", 1, date, 10), date, time.Now())
	t1 := date.Add(time.Second)
	s.Ingest([]signals.Sample{
		prov(signals.NameConfigGeneration, "site-b", "cluster-b", "pool", 2, t1),
		prov(signals.NameAverageRunning, "site-b", "cluster-b", "pool", 3, t1),
		prov(signals.NameAverageQueue, "site-b", "cluster-b", "pool", 8, date.Add(500*time.Millisecond)),
	}, t1, time.Now())
	b, _ := s.Snapshot().Site("site-b")
	p, _ := b.Provider("pool")
	g, _ := p.GenerationValue()
	assert.Equal(t, uint64(2), g)
	assert.Equal(t, t1, p.GenerationSince)
	assert.Equal(t, 3.0, p.Running.Value)
	assert.False(t, p.Queue.Known(), "the old generation's queue is cleared and an older row refused")
	assert.False(t, p.Ready.Known())
	assert.False(t, p.PublishesLoad.Known())

	// Without any generation row a provider's readings are kept as they
	// come (learning stays off; GenerationValue is not known).
	s.Ingest([]signals.Sample{prov(signals.NameAverageRunning, "site-c", "cluster-c", "pool", 1, date)}, t1, time.Now())
	c, _ := s.Snapshot().Site("site-c")
	cp, _ := c.Provider("pool")
	_, ok := cp.GenerationValue()
	assert.False(t, ok)
	assert.Equal(t, 1.0, cp.Running.Value)
	assert.False(t, cp.PublishesLoadKnown())
}

// TestSetTopology: a site that leaves the topology is dropped with its
// rows; one that comes back starts empty; a new cluster clears the
// site's providers.
func TestSetTopology(t *testing.T) {
	top := threeSites(t)
	s := New(top)
	s.Ingest(concat(batch("site-b", "cluster-b", "pool", 1, date, 1), batch("site-c", "cluster-c", "pool", 1, date, 1), rounds("site-c", date, 3, date)), date, time.Now())

	smaller, _ := topology.Build(local, []topology.Site{{Name: "site-c", Cluster: "cluster-c2", Gateway: "gw-c:443"}}, nil)
	smaller.Version = top.Version + 1
	s.SetTopology(smaller)
	sn := s.Snapshot()
	assert.Equal(t, smaller.Version, sn.TopologyVersion)
	_, ok := sn.Site("site-b")
	assert.False(t, ok, "a site that left the topology is dropped")
	c, _ := sn.Site("site-c")
	assert.Empty(t, c.Providers, "another cluster: the providers are cleared")
	assert.Equal(t, "cluster-c2", c.Cluster)
	assert.Equal(t, uint64(3), c.Rounds, "the peer's round rows stay")
	res := s.Ingest(batch("site-b", "cluster-b", "pool", 1, date, 1), date, time.Now())
	assert.Equal(t, 7, res.SiteMismatch)

	s.SetTopology(top)
	b, ok := s.Snapshot().Site("site-b")
	require.True(t, ok)
	assert.Empty(t, b.Providers, "a site that comes back starts empty")
}

// TestExpire: a provider the relay stopped sending is dropped once its
// newest row is older than MaxAge before the latest Date.
func TestExpire(t *testing.T) {
	s := New(threeSites(t))
	s.Ingest(concat(batch("site-b", "cluster-b", "old", 1, date, 1), batch("site-b", "cluster-b", "new", 1, date.Add(time.Hour), 1)), date.Add(time.Hour), time.Now())
	res := s.Ingest(nil, date.Add(MaxAge+time.Minute), time.Now())
	assert.Equal(t, 1, res.Expired)
	b, _ := s.Snapshot().Site("site-b")
	require.Len(t, b.Providers, 1)
	assert.Equal(t, "new", b.Providers[0].Name)
}

// TestSnapshotWhileIngesting: readers see complete, unchanging snapshots
// while the poller ingests (run with -race).
func TestSnapshotWhileIngesting(t *testing.T) {
	s := New(threeSites(t))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				sn := s.Snapshot()
				v := sn.Version
				for _, site := range sn.Sites() {
					for i := range site.Providers {
						_ = site.Providers[i].Running.Value
					}
				}
				if sn.Version != v {
					t.Error("a snapshot changed")
				}
			}
		}()
	}
	for i := range 200 {
		s.Ingest(batch("site-b", "cluster-b", fmt.Sprintf("pool-%d", i%70), 1, date.Add(time.Duration(i)*time.Millisecond), float64(i)), date.Add(time.Second), time.Now())
	}
	close(stop)
	wg.Wait()
}

// TestPublishesLoadFollowsEachIngest: every read of the relay is its
// whole view, so a provider whose publishes_load row a read leaves out
// (a relay restarted during a partition that has not heard from the peer
// since, G-49) is unmeasured until the row comes back (G-47, G-48); its
// other readings stay, and once the relay stops mentioning it at all it
// is dropped by the MaxAge rule.
func TestPublishesLoadFollowsEachIngest(t *testing.T) {
	s := New(threeSites(t))
	pub := func(v float64, at time.Time) signals.Sample {
		return prov(signals.NamePublishesLoad, "site-b", "cluster-b", "pool", v, at)
	}
	steps := []struct {
		name     string
		rows     []signals.Sample
		known    bool // PublishesLoad.Known
		publish  bool // PublishesLoadKnown
		present  bool
		running  float64
		expired  int
		deltaSec int
	}{
		{name: "the relay says 1", rows: batch("site-b", "cluster-b", "pool", 1, date, 4), known: true, publish: true, present: true, running: 4},
		{name: "the relay restarted: no row for the peer's provider", rows: rounds("site-b", date.Add(time.Second), 1, date.Add(time.Second)), present: true, running: 4, deltaSec: 1},
		{name: "the relay says 0 (no load received since it started)", rows: []signals.Sample{pub(0, date.Add(2*time.Second))}, known: true, present: true, running: 4, deltaSec: 2},
		{name: "the site returns", rows: concat(batch("site-b", "cluster-b", "pool", 1, date.Add(3*time.Second), 6)), known: true, publish: true, present: true, running: 6, deltaSec: 3},
		{name: "an empty read", rows: nil, present: true, running: 6, deltaSec: 4},
		{name: "the row again, stamped later", rows: []signals.Sample{pub(1, date.Add(5*time.Second))}, known: true, publish: true, present: true, running: 6, deltaSec: 5},
		{name: "never mentioned again: dropped after MaxAge", rows: nil, expired: 1, deltaSec: int((MaxAge + time.Minute) / time.Second)},
	}
	for _, st := range steps {
		d := date.Add(time.Duration(st.deltaSec) * time.Second)
		res := s.Ingest(st.rows, d, time.Now())
		assert.Equal(t, st.expired, res.Expired, st.name)
		b, _ := s.Snapshot().Site("site-b")
		p, ok := b.Provider("pool")
		require.Equal(t, st.present, ok, st.name)
		if !ok {
			continue
		}
		assert.Equal(t, st.known, p.PublishesLoad.Known(), st.name)
		assert.Equal(t, st.publish, p.PublishesLoadKnown(), st.name)
		assert.Equal(t, st.running, p.Running.Value, "%s: the load readings stay", st.name)
	}
}
