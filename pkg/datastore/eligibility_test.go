package datastore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// health returns the EndpointHealth the store publishes for name.
func health(t *testing.T, s *Store, name string) *scheduling.EndpointHealth {
	t.Helper()
	e, ok := s.Snapshot().Lookup(name)
	require.True(t, ok, name)
	h, ok := scheduling.HealthKey.Get(e)
	require.True(t, ok, "every endpoint carries its EndpointHealth")
	require.NotNil(t, h)
	return h
}

func TestEndpointDataAttributes(t *testing.T) {
	s, _ := newTestStore(t)
	models := []scheduling.ModelEntry{
		{Name: "llama-3-8b", Aliases: []string{"llama"}, Pricing: &scheduling.Price{Input: 0.1, Output: 0.2}},
		{Name: "mistral"},
	}
	in := []EndpointSpec{
		{Name: "a", Address: "127.0.0.1", Port: 1, Weight: 3, Models: models, Internal: true},
		{Name: "b", Address: "127.0.0.1", Port: 2},
	}
	require.NoError(t, s.Replace(in))
	models[0].Aliases[0] = "changed by the caller" // the store keeps its own copy

	a, _ := s.Snapshot().Lookup("a")
	b, _ := s.Snapshot().Lookup("b")
	load, ok := scheduling.LoadKey.Get(a)
	require.True(t, ok, "LoadKey reads the store's EndpointStats")
	assert.Same(t, s.Stats("a"), load.(*EndpointStats))
	st, _ := StatsKey.Get(a)
	assert.Same(t, st, load.(*EndpointStats), "StatsKey and LoadKey name the same attribute")
	w, _ := scheduling.WeightKey.Get(a)
	assert.Equal(t, 3, w)
	w, _ = scheduling.WeightKey.Get(b)
	assert.Equal(t, 1, w)
	m, ok := scheduling.ModelsKey.Get(a)
	require.True(t, ok)
	e, ok := m.Lookup("llama")
	require.True(t, ok, "the alias resolves")
	assert.Equal(t, "llama-3-8b", e.Name)
	assert.Equal(t, 0.2, e.Pricing.Output)
	_, ok = scheduling.ModelsKey.Get(b)
	assert.False(t, ok, "an endpoint that declares no model has no ModelsKey")
	internal, _ := scheduling.InternalKey.Get(a)
	assert.True(t, internal)
	_, ok = scheduling.InternalKey.Get(b)
	assert.False(t, ok)

	// The health pointer lives as long as the endpoint's identity.
	ha := health(t, s, "a")
	in[0].Weight = 5
	require.NoError(t, s.Replace(in))
	assert.Same(t, ha, health(t, s, "a"), "a spec update keeps the endpoint's health")
	in[0].Port = 9
	require.NoError(t, s.Replace(in))
	assert.NotSame(t, ha, health(t, s, "a"), "a new identity starts with a new health")
}

func TestModelsChangeIsAnUpdate(t *testing.T) {
	s, _ := newTestStore(t)
	sp := EndpointSpec{Name: "a", Address: "127.0.0.1", Port: 1, Models: []scheduling.ModelEntry{{Name: "m"}}}
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	v := s.Snapshot().Version
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	assert.Equal(t, v, s.Snapshot().Version, "equal models: nothing to publish")
	sp.Models = []scheduling.ModelEntry{{Name: "m", Pricing: &scheduling.Price{Input: 1}}}
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	assert.Greater(t, s.Snapshot().Version, v, "a price change is published")
	sp.Internal = true
	v = s.Snapshot().Version
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	assert.Greater(t, s.Snapshot().Version, v, "internal is part of the spec")
}

// TestUnpricedIsPublished: an entry whose pricing is null (Unpriced:
// shadowing a picker's price catalog) keeps the mark in the store's copy
// and in the published ModelsKey, and a change of it alone is an update.
func TestUnpricedIsPublished(t *testing.T) {
	s, _ := newTestStore(t)
	sp := EndpointSpec{Name: "a", Address: "127.0.0.1", Port: 1, Models: []scheduling.ModelEntry{{Name: "m", Unpriced: true}, {Name: "n"}}}
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	entry := func() (m, n *scheduling.ModelEntry) {
		t.Helper()
		e, _ := s.Snapshot().Lookup("a")
		models, ok := scheduling.ModelsKey.Get(e)
		require.True(t, ok)
		m, ok = models.Lookup("m")
		require.True(t, ok)
		n, ok = models.Lookup("n")
		require.True(t, ok)
		return m, n
	}
	m, n := entry()
	assert.True(t, m.Unpriced, "pricing: null reaches the picker")
	assert.Nil(t, m.Pricing)
	assert.False(t, n.Unpriced, "an entry without pricing takes the catalog's")

	v := s.Snapshot().Version
	sp.Models = []scheduling.ModelEntry{{Name: "m"}, {Name: "n"}}
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	assert.Greater(t, s.Snapshot().Version, v, "dropping pricing: null is published")
	m, _ = entry()
	assert.False(t, m.Unpriced)
	v = s.Snapshot().Version
	sp.Models = []scheduling.ModelEntry{{Name: "m", Unpriced: true}, {Name: "n"}}
	require.NoError(t, s.Replace([]EndpointSpec{sp}))
	assert.Greater(t, s.Snapshot().Version, v, "adding pricing: null is published")
	m, _ = entry()
	assert.True(t, m.Unpriced)
	assert.Equal(t, sp.Models, s.Specs()[0].Models, "Specs keep the mark")
}

// TestRoutable: eligibility (health check, breaker) and freshness, with
// fail-open on freshness only among the eligible endpoints.
func TestRoutable(t *testing.T) {
	type state struct {
		fresh   bool
		unknown bool // last scrape left the load unknown
		probe   scheduling.ProbeState
		breaker scheduling.BreakerState
	}
	fresh := state{fresh: true}
	stale := state{}
	tests := []struct {
		name     string
		scraping bool
		eps      map[string]state
		routable []string
		failOpen bool
		out      map[string]string // OutOfRotation of the others
		ready    []string          // Ready keeps its meaning
	}{
		{
			name: "all fresh and eligible", scraping: true,
			eps:      map[string]state{"a": fresh, "b": fresh, "c": fresh},
			routable: []string{"a", "b", "c"}, ready: []string{"a", "b", "c"},
		},
		{
			name: "stale ones out while another is fresh", scraping: true,
			eps:      map[string]state{"a": fresh, "b": stale, "c": stale},
			routable: []string{"a"}, ready: []string{"a"},
			out: map[string]string{"b": OutStale, "c": OutStale},
		},
		{
			name: "unhealthy fresh endpoint out", scraping: true,
			eps:      map[string]state{"a": {fresh: true, probe: scheduling.ProbeUnhealthy}, "b": fresh, "c": stale},
			routable: []string{"b"}, ready: []string{"a", "b"},
			out: map[string]string{"a": OutUnhealthy, "c": OutStale},
		},
		{
			name: "open breaker out", scraping: true,
			eps:      map[string]state{"a": {fresh: true, breaker: scheduling.BreakerOpen}, "b": fresh},
			routable: []string{"b"}, ready: []string{"a", "b"},
			out: map[string]string{"a": OutBreakerOpen},
		},
		{
			name: "healthy and half-open are eligible", scraping: true,
			eps:      map[string]state{"a": {fresh: true, probe: scheduling.ProbeHealthy}, "b": {fresh: true, breaker: scheduling.BreakerHalfOpen}},
			routable: []string{"a", "b"}, ready: []string{"a", "b"},
		},
		{
			name: "fail-open among the eligible only: the fresh but ineligible one stays out", scraping: true,
			eps:      map[string]state{"a": {fresh: true, breaker: scheduling.BreakerOpen}, "b": stale, "c": stale},
			routable: []string{"b", "c"}, failOpen: true, ready: []string{"a"},
			out: map[string]string{"a": OutBreakerOpen},
		},
		{
			name: "fail-open never re-admits the ineligible", scraping: true,
			eps:      map[string]state{"a": {probe: scheduling.ProbeUnhealthy}, "b": {breaker: scheduling.BreakerOpen}, "c": stale},
			routable: []string{"c"}, failOpen: true, ready: []string{"a", "b", "c"},
			out: map[string]string{"a": OutUnhealthy, "b": OutBreakerOpen},
		},
		{
			name: "none eligible: nothing routable", scraping: true,
			eps:      map[string]state{"a": {fresh: true, probe: scheduling.ProbeUnhealthy}, "b": {breaker: scheduling.BreakerOpen}},
			routable: nil, ready: []string{"a"},
			out: map[string]string{"a": OutUnhealthy, "b": OutBreakerOpen},
		},
		{
			name: "all stale and eligible: every endpoint, failing open", scraping: true,
			eps:      map[string]state{"a": stale, "b": stale},
			routable: []string{"a", "b"}, failOpen: true, ready: []string{"a", "b"},
		},
		{
			name: "fail-open skips the load-unknown while another eligible load is readable", scraping: true,
			eps:      map[string]state{"a": stale, "b": {unknown: true}, "c": stale},
			routable: []string{"a", "c"}, failOpen: true, ready: []string{"a", "c"},
			out: map[string]string{"b": OutStale},
		},
		{
			name: "fail-open skips the load-unknown beside an ineligible fresh one", scraping: true,
			eps:      map[string]state{"a": {fresh: true, breaker: scheduling.BreakerOpen}, "b": {unknown: true}, "c": stale},
			routable: []string{"c"}, failOpen: true, ready: []string{"a"},
			out: map[string]string{"a": OutBreakerOpen, "b": OutStale},
		},
		{
			name: "every eligible load unknown: all eligible, failing open", scraping: true,
			eps:      map[string]state{"a": {probe: scheduling.ProbeUnhealthy}, "b": {unknown: true}, "c": {unknown: true}},
			routable: []string{"b", "c"}, failOpen: true, ready: []string{"a"},
			out: map[string]string{"a": OutUnhealthy},
		},
		{
			name: "scraping disabled: the eligible ones", scraping: false,
			eps:      map[string]state{"a": {probe: scheduling.ProbeUnhealthy}, "b": stale},
			routable: []string{"b"}, ready: []string{"a", "b"},
			out: map[string]string{"a": OutUnhealthy},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestStore(t)
			s.SetScrapingEnabled(tt.scraping)
			var specs []EndpointSpec
			for _, n := range []string{"a", "b", "c"} {
				if _, ok := tt.eps[n]; ok {
					specs = append(specs, spec(n, "127.0.0."+string(rune('1'+len(specs))), 1))
				}
			}
			require.NoError(t, s.Replace(specs))
			for n, st := range tt.eps {
				if st.fresh {
					s.ReportScrape(targetID(t, s, n), ScrapeResult{})
				}
				if st.unknown {
					s.ReportScrape(targetID(t, s, n), ScrapeResult{LoadUnknown: "vllm:num_requests_waiting is NaN"})
				}
				h := health(t, s, n)
				h.SetProbe(st.probe)
				h.SetBreaker(st.breaker, s.now().Add(time.Minute))
			}
			s.Flush()
			sn := s.Snapshot()
			assert.Equal(t, tt.routable, nilIfEmpty(names(sn.Routable())), "Routable")
			assert.Equal(t, tt.failOpen, sn.RoutableFailOpen(), "RoutableFailOpen")
			assert.Equal(t, tt.ready, names(sn.Ready()), "Ready")
			ineligible := 0
			for n := range tt.eps {
				e, _ := sn.Lookup(n)
				want := tt.out[n]
				assert.Equal(t, want, sn.OutOfRotation(e), "OutOfRotation(%s)", n)
				if want == OutUnhealthy || want == OutBreakerOpen {
					ineligible++
				}
			}
			assert.Equal(t, ineligible, sn.IneligibleCount())
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestOutOfRotationUnknownEndpoint(t *testing.T) {
	s, _ := newTestStore(t)
	assert.Equal(t, OutNotInPool, s.Snapshot().OutOfRotation(nil))
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1)}))
	other := scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "zz", Address: "127.0.0.9", Port: 1}, scheduling.Metrics{}, nil)
	assert.Equal(t, OutNotInPool, s.Snapshot().OutOfRotation(other))
}

// TestHealthChangeIsPublished: a health change marks the snapshot out of
// date without publishing on the caller's goroutine; Flush (the
// publisher) shows it.
func TestHealthChangeIsPublished(t *testing.T) {
	s, _ := newTestStore(t)
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1), spec("b", "127.0.0.2", 1)}))
	v := s.Snapshot().Version
	h := health(t, s, "a")
	require.True(t, h.SetProbe(scheduling.ProbeUnhealthy))
	assert.Equal(t, v, s.Snapshot().Version, "the setter does not publish on the request path")
	assert.True(t, s.Flush())
	assert.Equal(t, []string{"b"}, names(s.Snapshot().Routable()))
	assert.False(t, s.Flush(), "nothing new")
	h.SetProbe(scheduling.ProbeHealthy)
	assert.True(t, s.Flush())
	assert.Equal(t, []string{"a", "b"}, names(s.Snapshot().Routable()))

	// A departed endpoint's health no longer wakes the store.
	s.Delete("a")
	v = s.Snapshot().Version
	h.SetProbe(scheduling.ProbeUnhealthy)
	assert.False(t, s.Flush())
	assert.Equal(t, v, s.Snapshot().Version)
}

// TestSweepEndsOpenBreaker: eligibility changes with time when an open
// breaker's interval ends; the sweep republishes without any new report.
func TestSweepEndsOpenBreaker(t *testing.T) {
	s, c := newTestStore(t)
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1), spec("b", "127.0.0.2", 1)}))
	health(t, s, "a").SetBreaker(scheduling.BreakerOpen, c.Now().Add(30*time.Second))
	require.True(t, s.Flush())
	assert.Equal(t, []string{"b"}, names(s.Snapshot().Routable()))
	c.Advance(29 * time.Second)
	assert.False(t, s.Flush(), "still open")
	c.Advance(time.Second)
	assert.True(t, s.Flush(), "the interval ended: half-open, eligible again")
	assert.Equal(t, []string{"a", "b"}, names(s.Snapshot().Routable()))
}

// TestRunPublisherPublishesHealth: the publisher loop picks up a health
// change promptly (the non-blocking signal), and a breaker's end of
// interval within a sweep.
func TestRunPublisherPublishesHealth(t *testing.T) {
	s := New(Options{StalenessThreshold: 100 * time.Millisecond})
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1), spec("b", "127.0.0.2", 1)}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.RunPublisher(ctx, 5*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	h := health(t, s, "a")
	h.SetProbe(scheduling.ProbeUnhealthy)
	require.Eventually(t, func() bool { return len(s.Snapshot().Routable()) == 1 }, time.Second, time.Millisecond)
	h.SetProbe(scheduling.ProbeHealthy)
	require.Eventually(t, func() bool { return len(s.Snapshot().Routable()) == 2 }, time.Second, time.Millisecond)
	h.SetBreaker(scheduling.BreakerOpen, time.Now().Add(150*time.Millisecond))
	require.Eventually(t, func() bool { return len(s.Snapshot().Routable()) == 1 }, time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return len(s.Snapshot().Routable()) == 2 }, time.Second, 5*time.Millisecond,
		"the sweep republishes once the open interval ends")
}

func TestCheckModels(t *testing.T) {
	long := string(make([]byte, MaxModelNameBytes+1))
	tests := []struct {
		name   string
		models []scheduling.ModelEntry
		errs   []string
	}{
		{name: "none"},
		{name: "valid", models: []scheduling.ModelEntry{{Name: "a", Aliases: []string{"b"}, Pricing: &scheduling.Price{Input: 1, Output: 2}}, {Name: "c"}}},
		{name: "empty name", models: []scheduling.ModelEntry{{Name: ""}}, errs: []string{"models[0].name: must not be empty"}},
		{name: "long name", models: []scheduling.ModelEntry{{Name: long}}, errs: []string{"models[0].name: must be at most 256 bytes"}},
		{name: "control character", models: []scheduling.ModelEntry{{Name: "a\nb"}}, errs: []string{"models[0].name: invalid model name"}},
		{
			name:   "alias equal to another name",
			models: []scheduling.ModelEntry{{Name: "a"}, {Name: "b", Aliases: []string{"a"}}},
			errs:   []string{`models[1].aliases[0]: "a" is also declared at models[0].name`},
		},
		{name: "name twice", models: []scheduling.ModelEntry{{Name: "a"}, {Name: "a"}}, errs: []string{`models[1].name: "a" is also declared`}},
		{
			name:   "bad prices",
			models: []scheduling.ModelEntry{{Name: "a", Pricing: &scheduling.Price{Input: -1, Output: 2e6}}},
			errs:   []string{"models[0].pricing.input: must be", "models[0].pricing.output: must be"},
		},
		{name: "too many", models: make([]scheduling.ModelEntry, MaxModels+1), errs: []string{"models: 257 models exceed the limit of 256"}},
		{name: "too many aliases", models: []scheduling.ModelEntry{{Name: "a", Aliases: make([]string, MaxAliases+1)}}, errs: []string{"models[0].aliases: 65 aliases exceed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errs ErrorList
			CheckModels(&errs, "models", tt.models)
			err := errs.Err()
			if len(tt.errs) == 0 {
				require.NoError(t, err)
				return
			}
			var ve *ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Len(t, ve.Errors, len(tt.errs), "%v", err)
			for i, want := range tt.errs {
				assert.Contains(t, ve.Errors[i].Path+": "+ve.Errors[i].Msg, want)
			}
		})
	}
}

// TestSpecModelsValidated: models are part of a spec's validation, with
// paths under the endpoint.
func TestSpecModelsValidated(t *testing.T) {
	err := ValidateSpecs([]EndpointSpec{{Name: "a", Address: "127.0.0.1", Port: 1, Models: []scheduling.ModelEntry{{Name: ""}}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "endpoints[0].models[0].name: must not be empty")
}

// TestNoScrape: an endpoint without metrics (EndpointSpec.NoScrape) is not
// a scrape target, is always fresh (Ready, Routable, even when every
// scraped endpoint is stale), keeps unmeasured metrics (zero UpdateTime)
// and drops the metrics it had when it stops being scraped; a scrape
// begun before is not recorded.
func TestNoScrape(t *testing.T) {
	s, clock := newTestStore(t)
	s.SetScrapingEnabled(true)
	hosted := spec("hosted", "127.0.0.2", 1)
	hosted.NoScrape = true
	require.NoError(t, s.Replace([]EndpointSpec{spec("a", "127.0.0.1", 1), hosted, spec("b", "127.0.0.3", 1)}))
	ts, _ := s.Targets()
	var targets []string
	for _, tg := range ts {
		targets = append(targets, tg.Spec.Name)
	}
	assert.Equal(t, []string{"a", "b"}, targets, "hosted is not scraped")

	s.ReportScrape(targetID(t, s, "a"), ScrapeResult{Metrics: scheduling.Metrics{WaitingQueueSize: 3}})
	s.Flush()
	sn := s.Snapshot()
	assert.Equal(t, []string{"a", "hosted"}, names(sn.Routable()), "hosted counts as fresh; b was never scraped")
	assert.Equal(t, []string{"a", "hosted"}, names(sn.Ready()))
	assert.Equal(t, OutStale, sn.OutOfRotation(lookup(t, sn, "b")))
	assert.True(t, lookup(t, sn, "hosted").Metrics().UpdateTime.IsZero(), "its load is not measured")

	// Every scraped endpoint stale (their scrapes broke, say): hosted
	// being always fresh must not take all the traffic; the scraped ones
	// fail open beside it, as they would without it.
	clock.Advance(time.Hour)
	s.Flush()
	sn = s.Snapshot()
	assert.Equal(t, []string{"a", "b", "hosted"}, names(sn.Routable()))
	assert.True(t, sn.RoutableFailOpen())
	assert.Equal(t, []string{"a", "b", "hosted"}, names(sn.Ready()))
	assert.True(t, sn.FailOpen())
	assert.Equal(t, 2, sn.StaleCount())
	assert.Equal(t, "", sn.OutOfRotation(lookup(t, sn, "b")), "routable while failing open")

	// ... but not to a scraped endpoint whose load is unknown while
	// another's is readable.
	s.ReportScrape(targetID(t, s, "b"), ScrapeResult{LoadUnknown: "nan"})
	s.Flush()
	sn = s.Snapshot()
	assert.Equal(t, []string{"a", "hosted"}, names(sn.Routable()))
	assert.Equal(t, []string{"a", "hosted"}, names(sn.Ready()))
	assert.Equal(t, OutStale, sn.OutOfRotation(lookup(t, sn, "b")))

	// a stops being scraped: its last metrics go, and a scrape begun
	// before is dropped.
	id := targetID(t, s, "a")
	a := spec("a", "127.0.0.1", 1)
	a.NoScrape = true
	require.NoError(t, s.Upsert(a))
	assert.False(t, s.ReportScrape(id, ScrapeResult{Metrics: scheduling.Metrics{WaitingQueueSize: 9}}))
	s.Flush()
	sn = s.Snapshot()
	ea := lookup(t, sn, "a")
	assert.Equal(t, scheduling.Metrics{}, *ea.Metrics(), "unmeasured, not the last scrape's values")
	assert.Equal(t, "", sn.OutOfRotation(ea))
	st, _ := s.ScrapeStatus("a")
	assert.Equal(t, ScrapeStatus{Fresh: true}, st, "never scraped, and fresh")
}

func lookup(t *testing.T, sn *Snapshot, name string) *scheduling.Endpoint {
	t.Helper()
	e, ok := sn.Lookup(name)
	require.True(t, ok, name)
	return e
}
