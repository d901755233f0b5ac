package datastore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestStore(t *testing.T) (*Store, *fakeClock) {
	t.Helper()
	c := newClock()
	return New(Options{Now: c.Now}), c
}

func spec(name, addr string, port int) EndpointSpec {
	return EndpointSpec{Name: name, Address: addr, Port: port}
}

func names(eps []*scheduling.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Name()
	}
	return out
}

// targetID returns the scrape target ID of the endpoint with this name.
func targetID(t *testing.T, s *Store, name string) uint64 {
	t.Helper()
	ts, _ := s.Targets()
	for _, tg := range ts {
		if tg.Spec.Name == name {
			return tg.ID
		}
	}
	t.Fatalf("no target %q", name)
	return 0
}

func TestNewStoreSnapshot(t *testing.T) {
	s, _ := newTestStore(t)
	sn := s.Snapshot()
	require.NotNil(t, sn)
	assert.Empty(t, sn.All())
	assert.Empty(t, sn.Ready())
	assert.False(t, sn.FailOpen())
	assert.False(t, sn.Synced)
	assert.Nil(t, sn.ByIP("127.0.0.1"))
	_, ok := sn.ByHostPort("127.0.0.1:1")
	assert.False(t, ok)
	assert.Nil(t, s.Stats("x"))
	assert.Equal(t, DefaultStalenessThreshold, s.StalenessThreshold())
}

func TestReplace(t *testing.T) {
	s, _ := newTestStore(t)
	var removed [][]string
	s.OnRemoved(func(keys []string) { removed = append(removed, slices.Sorted(slices.Values(keys))) })

	require.NoError(t, s.Replace([]EndpointSpec{spec("b", "127.0.0.2", 8000), spec("a", "127.0.0.1", 8000), spec("c", "127.0.0.3", 8000)}))
	sn := s.Snapshot()
	assert.Equal(t, []string{"a", "b", "c"}, names(sn.All()), "sorted by name")
	statsA, statsB := s.Stats("a"), s.Stats("b")
	require.NotNil(t, statsA)
	statsA.Start(3)
	idA := targetID(t, s, "a")
	require.True(t, s.ReportScrape(idA, ScrapeResult{Metrics: scheduling.Metrics{WaitingQueueSize: 7}}))
	require.True(t, s.Flush())

	// a: unchanged; b: new address (identity change); c: removed; d: added.
	v := s.Snapshot().Version
	require.NoError(t, s.Replace([]EndpointSpec{
		{Name: "a", Address: "127.0.0.1", Port: 8000, Labels: map[string]string{"new": "label"}},
		spec("b", "127.0.0.9", 8000),
		spec("d", "127.0.0.4", 8000),
	}))
	sn = s.Snapshot()
	assert.Greater(t, sn.Version, v)
	assert.Equal(t, []string{"a", "b", "d"}, names(sn.All()))
	assert.Same(t, statsA, s.Stats("a"), "same identity keeps stats")
	assert.Equal(t, int64(1), s.Stats("a").InFlight())
	assert.NotSame(t, statsB, s.Stats("b"), "new identity gets new stats")
	a, _ := sn.Lookup("a")
	assert.Equal(t, 7, a.Metrics().WaitingQueueSize, "same identity keeps metrics")
	assert.Equal(t, "label", a.Metadata().Labels["new"], "labels are updated")
	assert.Equal(t, idA, targetID(t, s, "a"))
	assert.Equal(t, [][]string{{"b", "c"}}, removed)

	// No change: no publish, no callback.
	v = s.Snapshot().Version
	ch := s.Changed()
	require.NoError(t, s.Replace(s.Specs()))
	assert.Equal(t, v, s.Snapshot().Version)
	select {
	case <-ch:
		t.Fatal("Changed closed without a change")
	default:
	}
	assert.Len(t, removed, 1)

	// Invalid: nothing changes.
	err := s.Replace([]EndpointSpec{spec("x", "127.0.0.1", 0)})
	var ve *ValidationError
	require.True(t, errors.As(err, &ve))
	assert.Equal(t, "endpoints[0].port", ve.Errors[0].Path)
	assert.Equal(t, []string{"a", "b", "d"}, names(s.Snapshot().All()))

	require.NoError(t, s.Replace(nil))
	assert.Empty(t, s.Snapshot().All())
	assert.Equal(t, []string{"a", "b", "d"}, removed[1])
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed")
	}
}

func TestUpsertDelete(t *testing.T) {
	s, _ := newTestStore(t)
	var removed []string
	s.OnRemoved(func(keys []string) { removed = append(removed, keys...) })

	require.NoError(t, s.Upsert(EndpointSpec{Name: "p-rank-0", Namespace: "ns", Address: "127.0.0.1", Port: 8000, Weight: 2}))
	require.NoError(t, s.Upsert(EndpointSpec{Name: "p-rank-1", Namespace: "ns", Address: "127.0.0.1", Port: 8001}))
	st := s.Stats("ns/p-rank-0")
	require.NotNil(t, st)
	assert.Same(t, st, s.Stats("p-rank-0"), "name and key both find it")

	// Same identity, new weight: stats kept.
	require.NoError(t, s.Upsert(EndpointSpec{Name: "p-rank-0", Namespace: "ns", Address: "127.0.0.1", Port: 8000, Weight: 5}))
	ep, ok := s.Snapshot().Lookup("ns/p-rank-0")
	require.True(t, ok)
	w, _ := WeightKey.Get(ep)
	assert.Equal(t, 5, w)
	assert.Same(t, st, s.Stats("ns/p-rank-0"))
	assert.Empty(t, removed)

	// Address:port of another endpoint.
	err := s.Upsert(EndpointSpec{Name: "other", Address: "127.0.0.1", Port: 8001})
	require.ErrorContains(t, err, "127.0.0.1:8001 is already the address of endpoint p-rank-1")
	// Invalid spec.
	require.ErrorContains(t, s.Upsert(EndpointSpec{Name: "x", Address: "127.0.0.1"}), "port: must be 1..65535")

	// Identity change: the old key is reported.
	require.NoError(t, s.Upsert(EndpointSpec{Name: "p-rank-0", Namespace: "ns", Address: "127.0.0.2", Port: 8000}))
	assert.Equal(t, []string{"ns/p-rank-0"}, removed)
	assert.NotSame(t, st, s.Stats("ns/p-rank-0"))

	// Moving rank-1 to the port rank-0 used to have is fine now.
	require.NoError(t, s.Upsert(EndpointSpec{Name: "p-rank-1", Namespace: "ns", Address: "127.0.0.1", Port: 8000}))

	s.Delete("ns/p-rank-1")
	s.Delete("unknown")
	s.Delete("wrong-ns/p-rank-0")
	assert.Equal(t, []string{"p-rank-0"}, names(s.Snapshot().All()))
	s.Delete("p-rank-0")
	assert.Empty(t, s.Snapshot().All())
	assert.Equal(t, []string{"ns/p-rank-0", "ns/p-rank-1", "ns/p-rank-1", "ns/p-rank-0"}, removed)
}

func TestSpecsAreCopies(t *testing.T) {
	s, _ := newTestStore(t)
	labels := map[string]string{"app": "x"}
	require.NoError(t, s.Upsert(EndpointSpec{Name: "a", Address: "127.0.0.1", Port: 1, Labels: labels}))
	labels["app"] = "changed"
	specs := s.Specs()
	require.Len(t, specs, 1)
	assert.Equal(t, "x", specs[0].Labels["app"])
	assert.Equal(t, 1, specs[0].Weight, "defaults applied")
	specs[0].Labels["app"] = "mutated"
	ep, _ := s.Snapshot().Lookup("a")
	assert.Equal(t, "x", ep.Metadata().Labels["app"])
}

func TestAttributes(t *testing.T) {
	s, _ := newTestStore(t)
	require.NoError(t, s.Replace([]EndpointSpec{
		{Name: "a", Address: "127.0.0.1", Port: 1, Engine: "sglang"},
		{Name: "b", Address: "127.0.0.1", Port: 2, Weight: 4},
	}))
	a, _ := s.Snapshot().Lookup("a")
	b, _ := s.Snapshot().Lookup("b")
	eng, ok := EngineKey.Get(a)
	assert.True(t, ok)
	assert.Equal(t, "sglang", eng)
	_, ok = EngineKey.Get(b)
	assert.False(t, ok, "no engine known before the first scrape")
	w, _ := WeightKey.Get(a)
	assert.Equal(t, 1, w)
	w, _ = WeightKey.Get(b)
	assert.Equal(t, 4, w)
	st, ok := StatsKey.Get(b)
	require.True(t, ok)
	assert.Same(t, s.Stats("b"), st)

	s.ReportScrape(targetID(t, s, "b"), ScrapeResult{Engine: "vllm"})
	s.Flush()
	b, _ = s.Snapshot().Lookup("b")
	eng, _ = EngineKey.Get(b)
	assert.Equal(t, "vllm", eng)
	st2, _ := StatsKey.Get(b)
	assert.Same(t, st, st2, "stats survive the attribute rebuild")
}

func TestReadyAndFreshness(t *testing.T) {
	type step struct {
		do        func(s *Store, c *fakeClock, id map[string]uint64)
		ready     []string
		stale     []string
		failOpen  bool
		published bool // Flush publishes
		unknown   int  // LoadUnknownCount
	}
	ok := func(name string) func(*Store, *fakeClock, map[string]uint64) {
		return func(s *Store, _ *fakeClock, id map[string]uint64) { s.ReportScrape(id[name], ScrapeResult{}) }
	}
	fail := func(name string) func(*Store, *fakeClock, map[string]uint64) {
		return func(s *Store, _ *fakeClock, id map[string]uint64) {
			s.ReportScrape(id[name], ScrapeResult{Err: errors.New("connection refused")})
		}
	}
	unknown := func(name string) func(*Store, *fakeClock, map[string]uint64) {
		return func(s *Store, _ *fakeClock, id map[string]uint64) {
			s.ReportScrape(id[name], ScrapeResult{LoadUnknown: "vllm:num_requests_waiting is NaN"})
		}
	}
	advance := func(d time.Duration) func(*Store, *fakeClock, map[string]uint64) {
		return func(_ *Store, c *fakeClock, _ map[string]uint64) { c.Advance(d) }
	}
	tests := []struct {
		name     string
		scraping bool
		steps    []step
	}{
		{
			name:     "scraping disabled: all ready, none stale",
			scraping: false,
			steps:    []step{{do: advance(time.Hour), ready: []string{"a", "b", "c"}, stale: nil}},
		},
		{
			name:     "never scraped: fail-open",
			scraping: true,
			steps:    []step{{do: advance(0), ready: []string{"a", "b", "c"}, stale: []string{"a", "b", "c"}, failOpen: true}},
		},
		{
			name:     "fresh ones only",
			scraping: true,
			steps: []step{
				{do: ok("a"), ready: []string{"a"}, stale: []string{"b", "c"}, published: true},
				{do: ok("c"), ready: []string{"a", "c"}, stale: []string{"b"}, published: true},
				{do: ok("b"), ready: []string{"a", "b", "c"}, published: true},
			},
		},
		{
			name:     "a failed scrape leaves Ready at the next publish",
			scraping: true,
			steps: []step{
				{do: func(s *Store, c *fakeClock, id map[string]uint64) {
					ok("a")(s, c, id)
					ok("b")(s, c, id)
				}, ready: []string{"a", "b"}, stale: []string{"c"}, published: true},
				{do: fail("a"), ready: []string{"b"}, stale: []string{"a", "c"}, published: true},
				{do: ok("a"), ready: []string{"a", "b"}, stale: []string{"c"}, published: true},
			},
		},
		{
			name:     "threshold crossed without a scrape",
			scraping: true,
			steps: []step{
				{do: ok("a"), ready: []string{"a"}, stale: []string{"b", "c"}, published: true},
				{do: advance(time.Second), ready: []string{"a"}, stale: []string{"b", "c"}, published: false},
				{do: ok("b"), ready: []string{"a", "b"}, stale: []string{"c"}, published: true},
				{do: advance(1100 * time.Millisecond), ready: []string{"b"}, stale: []string{"a", "c"}, published: true},
				{do: advance(time.Second), ready: []string{"a", "b", "c"}, stale: []string{"a", "b", "c"}, failOpen: true, published: true},
				{do: advance(time.Second), ready: []string{"a", "b", "c"}, stale: []string{"a", "b", "c"}, failOpen: true, published: false},
			},
		},
		{
			name:     "a scrape that leaves the load unknown leaves Ready like a failure",
			scraping: true,
			steps: []step{
				{do: func(s *Store, c *fakeClock, id map[string]uint64) {
					ok("a")(s, c, id)
					ok("b")(s, c, id)
				}, ready: []string{"a", "b"}, stale: []string{"c"}, published: true},
				{do: unknown("a"), ready: []string{"b"}, stale: []string{"a", "c"}, published: true, unknown: 1},
				{do: unknown("a"), ready: []string{"b"}, stale: []string{"a", "c"}, published: true, unknown: 1},
				{do: fail("a"), ready: []string{"b"}, stale: []string{"a", "c"}, published: true},
				{do: unknown("a"), ready: []string{"b"}, stale: []string{"a", "c"}, published: true, unknown: 1},
				{do: ok("a"), ready: []string{"a", "b"}, stale: []string{"c"}, published: true},
			},
		},
		{
			// Failing open does not reach the endpoints whose load is
			// unknown while another endpoint is merely failing (a server
			// whose scrape times out under load must not lose to broken
			// ones that read as idle).
			name:     "every endpoint unknown or failing: fail-open to the failing ones",
			scraping: true,
			steps: []step{
				{do: ok("a"), ready: []string{"a"}, stale: []string{"b", "c"}, published: true},
				{do: func(s *Store, c *fakeClock, id map[string]uint64) {
					unknown("a")(s, c, id)
					unknown("b")(s, c, id)
					fail("c")(s, c, id)
				}, ready: []string{"c"}, stale: []string{"a", "b", "c"}, failOpen: true, published: true, unknown: 2},
			},
		},
		{
			name:     "every endpoint's load unknown: fail-open to all",
			scraping: true,
			steps: []step{
				{do: func(s *Store, c *fakeClock, id map[string]uint64) {
					unknown("a")(s, c, id)
					unknown("b")(s, c, id)
					unknown("c")(s, c, id)
				}, ready: []string{"a", "b", "c"}, stale: []string{"a", "b", "c"}, failOpen: true, published: true, unknown: 3},
			},
		},
		{
			name:     "all failing: fail-open",
			scraping: true,
			steps: []step{
				{do: ok("a"), ready: []string{"a"}, stale: []string{"b", "c"}, published: true},
				{do: fail("a"), ready: []string{"a", "b", "c"}, stale: []string{"a", "b", "c"}, failOpen: true, published: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := newTestStore(t)
			s.SetScrapingEnabled(tt.scraping)
			require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1), spec("b", "127.0.0.2", 1), spec("c", "127.0.0.3", 1)}))
			id := map[string]uint64{}
			for _, n := range []string{"a", "b", "c"} {
				id[n] = targetID(t, s, n)
			}
			for i, st := range tt.steps {
				st.do(s, c, id)
				assert.Equal(t, st.published, s.Flush(), "step %d: published", i)
				sn := s.Snapshot()
				assert.Equal(t, st.ready, names(sn.Ready()), "step %d: ready", i)
				var stale []string
				for _, e := range sn.All() {
					if sn.Stale(e) {
						stale = append(stale, e.Name())
					}
				}
				assert.Equal(t, st.stale, stale, "step %d: stale", i)
				assert.Equal(t, len(st.stale), sn.StaleCount(), "step %d: stale count", i)
				assert.Equal(t, st.failOpen, sn.FailOpen(), "step %d: fail-open", i)
				assert.Equal(t, st.unknown, sn.LoadUnknownCount(), "step %d: load unknown", i)
			}
		})
	}
}

func TestReportScrape(t *testing.T) {
	s, c := newTestStore(t)
	s.SetScrapingEnabled(true)
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1)}))
	id := targetID(t, s, "a")
	assert.False(t, s.ReportScrape(id+100, ScrapeResult{}), "unknown ID")

	c.Advance(time.Second)
	t0 := c.Now()
	require.True(t, s.ReportScrape(id, ScrapeResult{Metrics: scheduling.Metrics{KVCacheUsagePercent: 0.5}, Engine: "vllm", Duration: 3 * time.Millisecond, Warning: "lora missing"}))
	before, _ := s.Snapshot().Lookup("a")
	assert.Zero(t, before.Metrics().KVCacheUsagePercent, "not published before Flush")
	s.Flush()
	ep, _ := s.Snapshot().Lookup("a")
	assert.Equal(t, 0.5, ep.Metrics().KVCacheUsagePercent)
	assert.Equal(t, t0, ep.Metrics().UpdateTime, "UpdateTime defaults to the report time")
	assert.Equal(t, 0.0, before.Metrics().KVCacheUsagePercent, "old snapshots are immutable")

	st, ok := s.ScrapeStatus("a")
	require.True(t, ok)
	assert.Equal(t, ScrapeStatus{Engine: "vllm", LastAttempt: t0, LastSuccess: t0, LastDuration: 3 * time.Millisecond, Warning: "lora missing", Fresh: true}, st)

	c.Advance(time.Second)
	t1 := c.Now()
	s.ReportScrape(id, ScrapeResult{Err: errors.New("boom")})
	s.ReportScrape(id, ScrapeResult{Err: errors.New("boom again")})
	st, _ = s.ScrapeStatus("a")
	assert.Equal(t, ScrapeStatus{Engine: "vllm", LastAttempt: t1, LastSuccess: t0, LastError: "boom again", Warning: "lora missing", ConsecutiveFailures: 2, Fresh: false}, st)
	s.Flush()
	ep2, _ := s.Snapshot().Lookup("a")
	assert.Equal(t, 0.5, ep2.Metrics().KVCacheUsagePercent, "a failure keeps the last metrics for display")
	assert.Equal(t, map[string]ScrapeStatus{"a": st}, s.ScrapeStatuses())
	_, ok = s.ScrapeStatus("b")
	assert.False(t, ok)

	// An identity change makes the old ID unknown.
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 2)}))
	assert.False(t, s.ReportScrape(id, ScrapeResult{}))
}

// TestReportScrapeLoadUnknown: a scrape that read the metrics but not the
// load counts as a failure, keeps the last good metrics in the snapshot
// (never the zeros, or anything else, of the bad scrape) and says why in
// ScrapeStatus.LoadUnknown.
func TestReportScrapeLoadUnknown(t *testing.T) {
	s, c := newTestStore(t)
	s.SetScrapingEnabled(true)
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1)}))
	id := targetID(t, s, "a")
	c.Advance(time.Second)
	t0 := c.Now()
	good := scheduling.Metrics{WaitingQueueSize: 3, RunningRequestsSize: 2, KVCacheUsagePercent: 0.5}
	s.ReportScrape(id, ScrapeResult{Metrics: good, Engine: "vllm", Warning: "lora missing"})
	s.Flush()

	c.Advance(time.Second)
	t1 := c.Now()
	const reason = "vllm:num_requests_waiting is NaN"
	s.ReportScrape(id, ScrapeResult{LoadUnknown: reason, Metrics: scheduling.Metrics{RunningRequestsSize: 99}, Engine: "vllm", Duration: time.Millisecond})
	require.True(t, s.Flush())
	st, _ := s.ScrapeStatus("a")
	assert.Equal(t, ScrapeStatus{Engine: "vllm", LastAttempt: t1, LastSuccess: t0, LastDuration: time.Millisecond, LoadUnknown: reason, Warning: "lora missing", ConsecutiveFailures: 1}, st)
	sn := s.Snapshot()
	ep, _ := sn.Lookup("a")
	want := good
	want.UpdateTime = t0
	assert.Equal(t, want, *ep.Metrics(), "the last good metrics, not those of the bad scrape")
	assert.True(t, sn.Stale(ep))
	assert.Equal(t, 1, sn.LoadUnknownCount())

	// A transport failure replaces the reason; a success clears both.
	s.ReportScrape(id, ScrapeResult{Err: errors.New("refused")})
	st, _ = s.ScrapeStatus("a")
	assert.Equal(t, "", st.LoadUnknown)
	assert.Equal(t, "refused", st.LastError)
	assert.Equal(t, 2, st.ConsecutiveFailures)
	s.ReportScrape(id, ScrapeResult{LoadUnknown: reason})
	st, _ = s.ScrapeStatus("a")
	assert.Equal(t, reason, st.LoadUnknown)
	assert.Equal(t, "", st.LastError)
	assert.Equal(t, 3, st.ConsecutiveFailures)
	s.ReportScrape(id, ScrapeResult{Metrics: good})
	st, _ = s.ScrapeStatus("a")
	assert.Equal(t, "", st.LoadUnknown)
	assert.True(t, st.Fresh)
	s.Flush()
	assert.Zero(t, s.Snapshot().LoadUnknownCount())

	// Without scraping nothing is stale, nor unknown.
	s.ReportScrape(id, ScrapeResult{LoadUnknown: reason})
	s.SetScrapingEnabled(false)
	assert.Zero(t, s.Snapshot().LoadUnknownCount())
	assert.Zero(t, s.Snapshot().StaleCount())
}

func TestLookups(t *testing.T) {
	s, _ := newTestStore(t)
	require.NoError(t, s.Replace([]EndpointSpec{
		{Name: "v6-b", Address: "::1", Port: 8001},
		{Name: "v6-a", Address: "0:0::1", Port: 8000},
		{Name: "v4", Address: "127.0.0.1", Port: 8000},
		{Name: "host", Namespace: "ns", Address: "Model.Example", Port: 80},
	}))
	sn := s.Snapshot()
	tests := []struct {
		hp   string
		want string
	}{
		{"127.0.0.1:8000", "v4"},
		{"[::1]:8000", "v6-a"},
		{"[::1]:8001", "v6-b"},
		{"[0::1]:8001", "v6-b"},
		{"[0000:0000::1]:8000", "v6-a"},
		{"model.example:80", "host"},
		{"MODEL.example:80", "host"},
		{"127.0.0.1:8001", ""},
		{"::1:8000", ""},
		{"garbage", ""},
		{"127.0.0.1:x", ""},
	}
	for _, tt := range tests {
		ep, ok := sn.ByHostPort(tt.hp)
		if tt.want == "" {
			assert.False(t, ok, tt.hp)
			continue
		}
		require.True(t, ok, tt.hp)
		assert.Equal(t, tt.want, ep.Name(), tt.hp)
	}
	ep, _ := sn.Lookup("v6-a")
	assert.Equal(t, "[::1]:8000", ep.HostPort())
	assert.Equal(t, "::1", ep.Metadata().Address)

	assert.Equal(t, []string{"v6-a", "v6-b"}, names(sn.ByIP("::1")))
	assert.Equal(t, []string{"v6-a", "v6-b"}, names(sn.ByIP("0::1")))
	assert.Equal(t, []string{"v6-a", "v6-b"}, names(sn.ByIP("[::1]")))
	assert.Equal(t, []string{"v4"}, names(sn.ByIP("127.0.0.1")))
	assert.Equal(t, []string{"host"}, names(sn.ByIP("model.example")))
	assert.Nil(t, sn.ByIP("127.0.0.2"))
	assert.Nil(t, sn.ByIP("not an ip"))
	got := sn.ByIP("::1")
	_ = append(got, nil)
	assert.Equal(t, []string{"v6-a", "v6-b"}, names(sn.ByIP("::1")), "appending to a result does not corrupt the snapshot")

	h, ok := sn.Lookup("ns/host")
	require.True(t, ok)
	assert.Equal(t, "ns/host", h.Key())
	_, ok = sn.Lookup("other/host")
	assert.False(t, ok)
	assert.True(t, sn.Stale(nil))
	assert.False(t, sn.Stale(h), "scraping disabled")
	assert.True(t, sn.Stale(scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "gone"}, scheduling.Metrics{}, nil)))
}

func TestSetSynced(t *testing.T) {
	s, _ := newTestStore(t)
	v := s.Snapshot().Version
	s.SetSynced(true)
	assert.True(t, s.Snapshot().Synced)
	assert.Equal(t, v+1, s.Snapshot().Version)
	s.SetSynced(true)
	assert.Equal(t, v+1, s.Snapshot().Version, "no change, no publish")
	s.SetSynced(false)
	assert.False(t, s.Snapshot().Synced)
}

func TestChangedAndTargets(t *testing.T) {
	s, _ := newTestStore(t)
	targets, ch := s.Targets()
	assert.Empty(t, targets)
	require.NoError(t, s.Upsert(EndpointSpec{Name: "a", Address: "127.0.0.1", Port: 1, MetricsPort: 9, MetricsPath: "/m", Engine: "vllm"}))
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed after Upsert")
	}
	targets, ch = s.Targets()
	require.Len(t, targets, 1)
	assert.Equal(t, "a", targets[0].Key)
	assert.Equal(t, "127.0.0.1:9", targets[0].Spec.MetricsHostPort())
	assert.Equal(t, "/m", targets[0].Spec.MetricsPath)
	s.SetSynced(true)
	select {
	case <-ch:
		t.Fatal("Changed closed by SetSynced")
	default:
	}
	s.Delete("a")
	<-ch
}

// TestOnRemovedOrder: callbacks run outside the lock (they may read the
// store) and in mutation order.
func TestOnRemovedOrder(t *testing.T) {
	s, _ := newTestStore(t)
	var mu sync.Mutex
	var seen []string
	s.OnRemoved(func(keys []string) {
		_ = s.Specs() // takes the store lock: must not deadlock
		mu.Lock()
		seen = append(seen, keys...)
		mu.Unlock()
	})
	s.OnRemoved(nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := string(rune('a' + i))
			sp := spec(name, "127.0.0.1", 1000+i)
			for range 50 {
				assert.NoError(t, s.Upsert(sp))
				s.Delete(name)
			}
		})
	}
	wg.Wait()
	assert.Len(t, seen, 8*50)

	// Sequentially: the callback sees the snapshot without the endpoint,
	// and may mutate the store.
	s2, _ := newTestStore(t)
	require.NoError(t, s2.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1), spec("b", "127.0.0.1", 2)}))
	calls := 0
	s2.OnRemoved(func(keys []string) {
		calls++
		_, present := s2.Snapshot().Lookup(keys[0])
		assert.False(t, present, "published before the callback")
		if keys[0] == "a" {
			s2.Delete("b") // nested: delivered after this callback returns
			assert.Equal(t, 1, calls)
		}
	})
	s2.Delete("a")
	assert.Equal(t, 2, calls)
	assert.Empty(t, s2.Snapshot().All())
}

func TestRunPublisher(t *testing.T) {
	s := New(Options{StalenessThreshold: 100 * time.Millisecond})
	s.SetScrapingEnabled(true)
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1), spec("b", "127.0.0.2", 1)}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunPublisher(ctx, 5*time.Millisecond)
	}()
	defer func() {
		cancel()
		<-done
	}()
	ida, idb := targetID(t, s, "a"), targetID(t, s, "b")
	s.ReportScrape(ida, ScrapeResult{})
	s.ReportScrape(idb, ScrapeResult{})
	require.Eventually(t, func() bool { return len(s.Snapshot().Ready()) == 2 && !s.Snapshot().FailOpen() }, time.Second, time.Millisecond)
	// b keeps succeeding; a hangs: the sweep drops it after the threshold.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				s.ReportScrape(idb, ScrapeResult{})
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()
	require.Eventually(t, func() bool { return slices.Equal(names(s.Snapshot().Ready()), []string{"b"}) }, time.Second, time.Millisecond)
	// A failure is published within the gap.
	s.ReportScrape(ida, ScrapeResult{})
	require.Eventually(t, func() bool { return len(s.Snapshot().Ready()) == 2 }, time.Second, time.Millisecond)
	s.ReportScrape(ida, ScrapeResult{Err: errors.New("refused")})
	start := time.Now()
	require.Eventually(t, func() bool { return len(s.Snapshot().Ready()) == 1 }, time.Second, time.Millisecond)
	assert.Less(t, time.Since(start), 100*time.Millisecond)
}

func TestSetScrapingEnabled(t *testing.T) {
	s, _ := newTestStore(t)
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1)}))
	assert.False(t, s.Snapshot().FailOpen())
	s.SetScrapingEnabled(true)
	assert.True(t, s.Snapshot().FailOpen())
	st, _ := s.ScrapeStatus("a")
	assert.False(t, st.Fresh)
	s.SetScrapingEnabled(false)
	assert.False(t, s.Snapshot().FailOpen())
	st, _ = s.ScrapeStatus("a")
	assert.True(t, st.Fresh)
}

// TestSitedEndpointKeyWithoutNamespace: an endpoint with a site and no
// namespace is found by its key "site:name", and not by "site/name", which
// is the key of the namespace of that name's endpoint.
func TestSitedEndpointKeyWithoutNamespace(t *testing.T) {
	s, _ := newTestStore(t)
	sp := EndpointSpec{Name: "b", Site: "a", Address: "127.0.0.1", Port: 8000}
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	require.Equal(t, "a:b", sp.Key())
	ns := EndpointSpec{Name: "b", Namespace: "a", Address: "127.0.0.1", Port: 8000}
	require.NotEqual(t, sp.Key(), ns.Key(), "site a and namespace a differ")

	sn := s.Snapshot()
	ep, ok := sn.Lookup("a:b")
	require.True(t, ok, "found by its key")
	assert.Equal(t, "a:b", ep.Key())
	assert.NotNil(t, s.Stats("a:b"))
	_, ok = s.ScrapeStatus("a:b")
	assert.True(t, ok)
	_, ok = sn.Lookup("a/b")
	assert.False(t, ok, "a/b is namespace a's endpoint b")
	assert.Nil(t, s.Stats("a/b"))
	_, ok = s.ScrapeStatus("a/b")
	assert.False(t, ok)
	other := scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "b", Namespace: "a", Address: "127.0.0.1", Port: 8000}, scheduling.Metrics{}, nil)
	assert.True(t, sn.Stale(other), "namespace a's endpoint b is not in the store")
}

// TestSitedEndpointKey: an endpoint with a site is indexed under the key
// its *scheduling.Endpoint gives (one definition, with the site in it), so
// Snapshot.Stale, Lookup, Stats and ScrapeStatus find it by that key, the
// OnRemoved callbacks get it, and a site change is an identity change.
func TestSitedEndpointKey(t *testing.T) {
	s, c := newTestStore(t)
	s.SetScrapingEnabled(true)
	var removed []string
	s.OnRemoved(func(keys []string) { removed = append(removed, keys...) })
	sp := EndpointSpec{Name: "vllm-0", Namespace: "inference", Site: "eu-west", Address: "127.0.0.1", Port: 8000}
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	assert.Equal(t, "eu-west:inference/vllm-0", sp.Key())
	c.Advance(time.Second)
	require.True(t, s.ReportScrape(targetID(t, s, "vllm-0"), ScrapeResult{Metrics: scheduling.Metrics{WaitingQueueSize: 1}}))
	s.Flush()

	sn := s.Snapshot()
	ep, ok := sn.Lookup("eu-west:inference/vllm-0")
	require.True(t, ok, "found by its key")
	assert.Equal(t, sp.Key(), ep.Key(), "the spec and the endpoint agree on the key")
	assert.Equal(t, "eu-west", ep.Metadata().Site)
	assert.False(t, sn.Stale(ep), "a fresh sited endpoint is found by Stale, not reported stale")
	assert.Len(t, sn.Ready(), 1)
	assert.NotNil(t, s.Stats(ep.Key()))
	_, ok = s.ScrapeStatus(ep.Key())
	assert.True(t, ok)
	ts, _ := s.Targets()
	assert.Equal(t, ep.Key(), ts[0].Key)
	_, ok = sn.Lookup("inference/vllm-0")
	assert.False(t, ok, "the key without the site is another endpoint's")
	// The same name, namespace and address at another site (or at the
	// local site) is not this endpoint.
	other := scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "vllm-0", Namespace: "inference", Address: "127.0.0.1", Port: 8000}, scheduling.Metrics{}, nil)
	assert.True(t, sn.Stale(other))

	// Moving the endpoint to another site changes its identity.
	sp.Site = "us-east"
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	assert.Equal(t, []string{"eu-west:inference/vllm-0"}, removed)
	_, ok = s.Snapshot().Lookup("us-east:inference/vllm-0")
	assert.True(t, ok)

	// A site is a DNS-1123 label.
	bad := sp
	bad.Site = "EU_West"
	err := bad.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "site: invalid site")
}
