package datastore

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// DefaultStalenessThreshold is the default of --metrics-staleness-threshold.
const DefaultStalenessThreshold = 2 * time.Second

// Options configures a Store.
type Options struct {
	// StalenessThreshold is how old an endpoint's last successful scrape may
	// be for the endpoint to count as fresh (--metrics-staleness-threshold).
	// 0 means DefaultStalenessThreshold.
	StalenessThreshold time.Duration
	// Logger receives per-change logs (V(1)). The zero value discards.
	Logger logr.Logger
	// Now is the clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// ScrapeTarget is one endpoint as a metrics scraper sees it.
type ScrapeTarget struct {
	// ID identifies this endpoint incarnation for ReportScrape. It stays
	// the same while the endpoint's identity (site, namespace, name, address,
	// port) does, and changes when any of these change.
	ID uint64
	// Key is the endpoint's key, as Endpoint.Key() gives it.
	Key string
	// Spec is the normalized spec (defaults applied). Its Labels map is
	// shared and read-only.
	Spec EndpointSpec
}

// ScrapeResult is the outcome of one metrics scrape.
type ScrapeResult struct {
	// Metrics are the metrics read; used only when Err is nil.
	Metrics scheduling.Metrics
	// Err is nil for a successful scrape; otherwise the endpoint counts as
	// failing (and stale) until its next successful scrape.
	Err error
	// Warning describes metrics that a successful scrape could not read
	// (e.g. a metric family the server does not expose).
	Warning string
	// LoadUnknown, when Err is nil, says that the scrape reached the
	// server but could not read its load: which metric and why
	// ("vllm:num_requests_waiting is NaN"). A value that cannot be read must
	// never look like an idle server, so the endpoint then counts as
	// failing (not fresh, out of Ready while another endpoint is fresh)
	// exactly as with Err, Metrics are ignored (the snapshot keeps the last
	// good scrape's metrics, never the zeros of this one), and ScrapeStatus
	// reports the reason in LoadUnknown instead of LastError.
	LoadUnknown string
	// Engine is the engine mapping used.
	Engine string
	// Duration is how long the scrape took.
	Duration time.Duration
	// At is when the scrape finished; zero means the store's clock now.
	At time.Time
}

// ScrapeStatus is the scrape history of one endpoint, for debug pages and
// tables.
type ScrapeStatus struct {
	// Engine is the engine mapping the last scrape used.
	Engine string
	// LastAttempt is when the last scrape finished (zero: never scraped).
	LastAttempt time.Time
	// LastSuccess is when the last successful scrape finished.
	LastSuccess time.Time
	// LastDuration is how long the last scrape took.
	LastDuration time.Duration
	// LastError is the error of the last scrape; "" when it succeeded or
	// when it read the metrics but not the load (see LoadUnknown).
	LastError string
	// LoadUnknown is the reason the last scrape left the endpoint's load
	// unknown (ScrapeResult.LoadUnknown), e.g. "vllm:num_requests_waiting
	// is NaN"; "" otherwise. Such an endpoint is not fresh.
	LoadUnknown string
	// Warning lists metrics the last successful scrape could not read.
	Warning string
	// ConsecutiveFailures counts failed scrapes, and scrapes that left the
	// load unknown, since the last success.
	ConsecutiveFailures int
	// Fresh reports whether the endpoint's metrics are fresh now (see the
	// package documentation); always true when scraping is disabled.
	Fresh bool
}

// entry is the store's state of one endpoint.
type entry struct {
	id       uint64
	spec     EndpointSpec // normalized
	key      string
	hostPort string
	meta     scheduling.EndpointMetadata
	attrs    map[string]any
	stats    *EndpointStats
	health   *scheduling.EndpointHealth

	metrics scheduling.Metrics
	status  ScrapeStatus
	// ep is the endpoint last published; nil when metadata, metrics or
	// attributes changed since.
	ep *scheduling.Endpoint
	// fresh is the freshness the last published snapshot shows.
	fresh bool
	// eligible is the eligibility (EndpointHealth.Eligible) the last
	// published snapshot shows.
	eligible bool
}

// Store holds the pool's endpoints, their latest metrics and live request
// statistics, and publishes them as immutable Snapshots. Endpoint sources
// mutate it (Replace, Upsert, Delete, SetSynced); the metrics scraper
// reports scrape results (ReportScrape) and drives coalesced publishing
// (RunPublisher); the request path only calls Snapshot, one atomic load.
// All methods are safe for concurrent use.
type Store struct {
	threshold time.Duration
	log       logr.Logger
	now       func() time.Time

	snap atomic.Pointer[Snapshot]
	// dirtyCh signals (capacity 1) that scrape results or health changes
	// wait for publishing.
	dirtyCh chan struct{}
	// healthDirty is set by an EndpointHealth change (from the request
	// path or a health checker) and cleared by the publish that shows it.
	healthDirty atomic.Bool
	// notify is every EndpointHealth's notify function: lock-free and
	// non-blocking, so the request path may trigger it.
	notify func()

	mu         sync.Mutex
	entries    map[string]*entry // by name
	byID       map[uint64]*entry
	byHostPort map[string]*entry
	nextID     uint64
	order      []*entry // sorted by name; nil when the set changed
	idx        *index
	dirty      bool
	synced     bool
	scraping   bool
	version    uint64
	changed    chan struct{}

	// Removals wait in pending (mutation order) and are delivered by
	// whichever goroutine holds cbMu, outside mu, so callbacks may read
	// the store and run in order.
	qMu       sync.Mutex
	pending   [][]string
	cbMu      sync.Mutex
	fnMu      sync.Mutex
	onRemoved []func(keys []string)
}

// New returns an empty store: no endpoints, not synced, scraping disabled
// (every endpoint counts as ready until a scraper calls
// SetScrapingEnabled(true)).
func New(opts Options) *Store {
	if opts.StalenessThreshold <= 0 {
		opts.StalenessThreshold = DefaultStalenessThreshold
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{
		threshold:  opts.StalenessThreshold,
		log:        opts.Logger,
		now:        opts.Now,
		dirtyCh:    make(chan struct{}, 1),
		entries:    map[string]*entry{},
		byID:       map[uint64]*entry{},
		byHostPort: map[string]*entry{},
		changed:    make(chan struct{}),
	}
	s.notify = s.healthChanged
	s.mu.Lock()
	s.publishLocked(s.now())
	s.mu.Unlock()
	return s
}

// StalenessThreshold returns the store's staleness threshold.
func (s *Store) StalenessThreshold() time.Duration { return s.threshold }

// Snapshot returns the current snapshot: one atomic load, no lock, no
// allocation. It is never nil.
func (s *Store) Snapshot() *Snapshot { return s.snap.Load() }

// Replace sets the whole endpoint set, as a full resync does. It validates
// every spec (ValidateSpecs) and changes nothing if any is invalid.
// Endpoints whose identity (site, namespace, name, address and port) is unchanged
// keep their metrics, scrape status and EndpointStats; others start fresh.
// Endpoints that leave, or whose identity changed, are reported to the
// OnRemoved callbacks after the new snapshot is published.
func (s *Store) Replace(specs []EndpointSpec) error {
	if err := ValidateSpecs(specs); err != nil {
		return err
	}
	norm := make([]EndpointSpec, len(specs))
	for i := range specs {
		norm[i] = normalize(specs[i])
	}
	s.mu.Lock()
	keep := make(map[string]bool, len(norm))
	var removed []string
	changed := false
	for i := range norm {
		sp := &norm[i]
		keep[sp.Name] = true
		rm, ch := s.putLocked(sp)
		removed = append(removed, rm...)
		changed = changed || ch
	}
	for name, e := range s.entries {
		if !keep[name] {
			s.deleteLocked(e)
			removed = append(removed, e.key)
			changed = true
		}
	}
	if changed {
		s.log.V(1).Info("Endpoint set replaced", "endpoints", len(s.entries), "removed", len(removed))
	}
	slices.Sort(removed)
	s.finishMutation(changed, removed)
	return nil
}

// Upsert adds an endpoint or updates the one with the same name. The spec
// must be valid and its address:port must not belong to another endpoint.
// An update that keeps the identity (site, namespace, name, address, port) keeps
// the endpoint's metrics and stats; otherwise the old endpoint is reported
// to the OnRemoved callbacks.
func (s *Store) Upsert(spec EndpointSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	sp := normalize(spec)
	s.mu.Lock()
	if other := s.byHostPort[sp.HostPort()]; other != nil && other.spec.Name != sp.Name {
		s.mu.Unlock()
		return &ValidationError{Errors: []FieldError{{Path: "port", Msg: sp.HostPort() + " is already the address of endpoint " + other.spec.Name}}}
	}
	removed, changed := s.putLocked(&sp)
	if changed {
		s.log.V(1).Info("Endpoint upserted", "endpoint", sp.Key(), "address", sp.HostPort())
	}
	s.finishMutation(changed, removed)
	return nil
}

// Delete removes the endpoint with this name (or key, "namespace/name").
// Deleting an unknown endpoint does nothing.
func (s *Store) Delete(name string) {
	s.mu.Lock()
	e := s.lookupLocked(name)
	if e == nil {
		s.mu.Unlock()
		return
	}
	s.deleteLocked(e)
	s.log.V(1).Info("Endpoint deleted", "endpoint", e.key)
	s.finishMutation(true, []string{e.key})
}

// SetSynced records whether an endpoint source has loaded the pool (the
// readiness signal). It publishes a new snapshot when the value changes.
func (s *Store) SetSynced(synced bool) {
	s.mu.Lock()
	if s.synced != synced {
		s.synced = synced
		s.publishLocked(s.now())
	}
	s.mu.Unlock()
}

// SetScrapingEnabled says whether a metrics scraper runs. While it does
// not, freshness is not tracked: every endpoint is ready and none is stale.
// A scraper enables it when it has an extractor to read metrics with.
func (s *Store) SetScrapingEnabled(enabled bool) {
	s.mu.Lock()
	if s.scraping != enabled {
		s.scraping = enabled
		s.publishLocked(s.now())
	}
	s.mu.Unlock()
}

// OnRemoved registers fn to be called with the keys (Endpoint.Key()) of
// endpoints that left the store or whose identity changed (a key may then
// be present again, for a new endpoint). Calls happen after the snapshot
// without those endpoints is published, outside the store's lock, one at a
// time and in the order of the mutations, usually on the goroutine that
// made the change (or on another one that is delivering at the same time,
// in which case the mutation may return first). fn may read and even
// mutate the store, but should be quick.
func (s *Store) OnRemoved(fn func(keys []string)) {
	if fn == nil {
		return
	}
	s.fnMu.Lock()
	s.onRemoved = append(s.onRemoved, fn)
	s.fnMu.Unlock()
}

// Stats returns the live statistics of the endpoint with this key
// (Endpoint.Key()) or name, or nil if there is none. The pointer stays the
// same for the endpoint's life.
func (s *Store) Stats(key string) *EndpointStats {
	ep, ok := s.Snapshot().Lookup(key)
	if !ok {
		return nil
	}
	st, _ := StatsKey.Get(ep)
	return st
}

// Specs returns the current specs (normalized, with their own label maps),
// sorted by name.
func (s *Store) Specs() []EndpointSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]EndpointSpec, 0, len(s.entries))
	for _, e := range s.sortedLocked() {
		sp := e.spec
		if sp.Labels != nil {
			sp.Labels = maps.Clone(sp.Labels)
		}
		out = append(out, sp)
	}
	return out
}

// Changed returns a channel that is closed at the next change of the
// endpoint set or of any spec. To watch without missing a change, take the
// channel before reading the state (or use Targets, which returns both
// together).
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Targets returns the endpoints to scrape (all but the NoScrape ones),
// sorted by name, and the channel that is closed when they change.
func (s *Store) Targets() ([]ScrapeTarget, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ScrapeTarget, 0, len(s.entries))
	for _, e := range s.sortedLocked() {
		if e.spec.NoScrape {
			continue
		}
		out = append(out, ScrapeTarget{ID: e.id, Key: e.key, Spec: e.spec})
	}
	return out, s.changed
}

// ScrapeStatus returns the scrape status of the endpoint with this key or
// name.
func (s *Store) ScrapeStatus(key string) (ScrapeStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookupLocked(key)
	if e == nil {
		return ScrapeStatus{}, false
	}
	st := e.status
	st.Fresh = s.freshLocked(e, s.now())
	return st, true
}

// ScrapeStatuses returns every endpoint's scrape status by key.
func (s *Store) ScrapeStatuses() map[string]ScrapeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make(map[string]ScrapeStatus, len(s.entries))
	for _, e := range s.entries {
		st := e.status
		st.Fresh = s.freshLocked(e, now)
		out[e.key] = st
	}
	return out
}

// ReportScrape records the result of scraping the endpoint with this
// target ID. It reports false (and records nothing) when that endpoint is
// gone, its identity changed or it is no longer scraped
// (EndpointSpec.NoScrape). The result reaches the published snapshot
// at the next Flush; RunPublisher flushes promptly.
func (s *Store) ReportScrape(id uint64, r ScrapeResult) bool {
	s.mu.Lock()
	e := s.byID[id]
	if e == nil || e.spec.NoScrape {
		// Gone, or no longer scraped (a scrape begun before).
		s.mu.Unlock()
		return false
	}
	at := r.At
	if at.IsZero() {
		at = s.now()
	}
	st := &e.status
	st.LastAttempt = at
	st.LastDuration = r.Duration
	engine := r.Engine
	if engine == "" {
		engine = st.Engine
	}
	switch {
	case r.Err != nil:
		st.LastError = r.Err.Error()
		st.LoadUnknown = ""
		st.ConsecutiveFailures++
	case r.LoadUnknown != "":
		// Like a failure: the metrics of this scrape are not kept.
		st.LastError = ""
		st.LoadUnknown = r.LoadUnknown
		st.ConsecutiveFailures++
	default:
		st.LastError = ""
		st.LoadUnknown = ""
		st.Warning = r.Warning
		st.ConsecutiveFailures = 0
		st.LastSuccess = at
		e.metrics = r.Metrics
		if e.metrics.UpdateTime.IsZero() {
			e.metrics.UpdateTime = at
		}
		e.ep = nil
	}
	if engine != st.Engine {
		st.Engine = engine
		e.attrs = makeAttrs(&e.spec, e.stats, e.health, engine)
		e.ep = nil
	}
	s.dirty = true
	s.mu.Unlock()
	select {
	case s.dirtyCh <- struct{}{}:
	default:
	}
	return true
}

// healthChanged is the notify function of every EndpointHealth: it marks
// the snapshot out of date and wakes the publisher (RunPublisher) without
// blocking, so a breaker tripping on the request path costs two atomic
// operations there and the republish happens off it.
func (s *Store) healthChanged() {
	s.healthDirty.Store(true)
	select {
	case s.dirtyCh <- struct{}{}:
	default:
	}
}

// Flush publishes a new snapshot if scrape results or health changes are
// waiting, or if an endpoint's freshness or eligibility changed with time
// (its last success became older than the staleness threshold, or its
// open circuit breaker's interval ended). It reports whether it
// published.
func (s *Store) Flush() bool {
	health := s.healthDirty.Swap(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !s.dirty && !health && !s.changedWithTimeLocked(now) {
		return false
	}
	s.publishLocked(now)
	return true
}

// RunPublisher publishes scrape results and health changes until ctx is
// done: after a result is reported (or an EndpointHealth changes) it
// flushes, then waits minGap before the next flush so that a burst is
// published once; it also sweeps every StalenessThreshold/10 (between 5 ms
// and 250 ms) so that an endpoint whose scrapes hang leaves Ready once its
// last success is too old, and an endpoint whose open circuit breaker's
// interval ended comes back into Routable. A scraper runs it (the server
// always runs the scraper, also with the data layer disabled); with
// minGap ≤ the scrape interval every result is visible within one
// interval.
func (s *Store) RunPublisher(ctx context.Context, minGap time.Duration) {
	sweep := min(max(s.threshold/10, 5*time.Millisecond), 250*time.Millisecond)
	ticker := time.NewTicker(sweep)
	defer ticker.Stop()
	var gap *time.Timer
	if minGap > 0 {
		gap = time.NewTimer(minGap)
		gap.Stop()
		defer gap.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirtyCh:
		case <-ticker.C:
		}
		if !s.Flush() || gap == nil {
			continue
		}
		gap.Reset(minGap)
		select {
		case <-ctx.Done():
			return
		case <-gap.C:
		}
	}
}

// putLocked inserts or updates one normalized, valid spec. It returns the
// key of an entry replaced because its identity changed, and whether
// anything changed.
func (s *Store) putLocked(sp *EndpointSpec) (removed []string, changed bool) {
	old := s.entries[sp.Name]
	if old != nil {
		if sameSpec(&old.spec, sp) {
			return nil, false
		}
		if old.key == sp.Key() && old.hostPort == sp.HostPort() {
			// Same identity: keep metrics, status and stats.
			if sp.NoScrape && !old.spec.NoScrape {
				// No longer scraped: its load is not measured, and
				// the last scrape's metrics would not age.
				old.metrics = scheduling.Metrics{}
				old.status = ScrapeStatus{}
			}
			old.spec = *sp
			old.meta = metadata(sp)
			old.attrs = makeAttrs(sp, old.stats, old.health, engineOf(sp, old.status.Engine))
			old.ep = nil
			s.byHostPort[old.hostPort] = old
			s.order = nil
			return nil, true
		}
		s.deleteLocked(old)
		removed = []string{old.key}
	}
	s.nextID++
	e := &entry{
		id:       s.nextID,
		spec:     *sp,
		key:      sp.Key(),
		hostPort: sp.HostPort(),
		meta:     metadata(sp),
		stats:    &EndpointStats{},
		health:   &scheduling.EndpointHealth{},
	}
	e.health.SetNotify(s.notify)
	e.attrs = makeAttrs(sp, e.stats, e.health, sp.Engine)
	s.entries[sp.Name] = e
	s.byID[e.id] = e
	s.byHostPort[e.hostPort] = e
	s.order = nil
	return removed, true
}

func (s *Store) deleteLocked(e *entry) {
	delete(s.entries, e.spec.Name)
	delete(s.byID, e.id)
	if s.byHostPort[e.hostPort] == e {
		delete(s.byHostPort, e.hostPort)
	}
	// Plugins may still write to a departed endpoint's health (requests
	// in flight complete); that must not republish.
	e.health.SetNotify(nil)
	s.order = nil
}

// finishMutation publishes and notifies after a mutation, releases mu and
// calls the OnRemoved callbacks. It must be called with mu held.
func (s *Store) finishMutation(changed bool, removed []string) {
	if !changed {
		s.mu.Unlock()
		return
	}
	s.publishLocked(s.now())
	close(s.changed)
	s.changed = make(chan struct{})
	if len(removed) == 0 {
		s.mu.Unlock()
		return
	}
	s.qMu.Lock()
	s.pending = append(s.pending, removed)
	s.qMu.Unlock()
	s.mu.Unlock()
	s.deliverRemoved()
}

// deliverRemoved calls the OnRemoved callbacks for every pending batch, in
// order. If another goroutine is delivering, it leaves the batches to it:
// that goroutine checks the queue again after releasing cbMu.
func (s *Store) deliverRemoved() {
	for {
		if !s.cbMu.TryLock() {
			return
		}
		for {
			s.qMu.Lock()
			if len(s.pending) == 0 {
				s.qMu.Unlock()
				break
			}
			batch := s.pending[0]
			s.pending[0] = nil
			s.pending = s.pending[1:]
			s.qMu.Unlock()
			s.fnMu.Lock()
			fns := slices.Clone(s.onRemoved)
			s.fnMu.Unlock()
			for _, fn := range fns {
				fn(batch)
			}
		}
		s.cbMu.Unlock()
		s.qMu.Lock()
		more := len(s.pending) > 0
		s.qMu.Unlock()
		if !more {
			return
		}
	}
}

// lookupLocked finds an entry by name or by key. A name holds neither '/'
// nor ':', so the name is what follows the key's last '/' or ':' (see
// scheduling.EndpointKey).
func (s *Store) lookupLocked(key string) *entry {
	if e := s.entries[key]; e != nil {
		return e
	}
	if i := strings.LastIndexAny(key, "/:"); i >= 0 {
		if e := s.entries[key[i+1:]]; e != nil && e.key == key {
			return e
		}
	}
	return nil
}

func (s *Store) sortedLocked() []*entry {
	if s.order == nil {
		s.order = make([]*entry, 0, len(s.entries))
		for _, e := range s.entries {
			s.order = append(s.order, e)
		}
		slices.SortFunc(s.order, func(a, b *entry) int { return cmp.Compare(a.spec.Name, b.spec.Name) })
		s.idx = nil
	}
	return s.order
}

// freshLocked reports whether e's metrics are fresh at now. An endpoint
// that is not scraped (EndpointSpec.NoScrape) has none to be stale.
func (s *Store) freshLocked(e *entry, now time.Time) bool {
	if !s.scraping || e.spec.NoScrape {
		return true
	}
	st := &e.status
	return !st.LastSuccess.IsZero() && st.ConsecutiveFailures == 0 && now.Sub(st.LastSuccess) <= s.threshold
}

// loadUnknownLocked reports whether e's scraped metrics say its load
// cannot be read (an endpoint that is not scraped has no such verdict).
func (s *Store) loadUnknownLocked(e *entry) bool {
	return s.scraping && !e.spec.NoScrape && e.status.LoadUnknown != ""
}

// changedWithTimeLocked reports whether an endpoint's freshness or
// eligibility at now differs from what the last snapshot shows.
func (s *Store) changedWithTimeLocked(now time.Time) bool {
	for _, e := range s.entries {
		if s.freshLocked(e, now) != e.fresh {
			return true
		}
		if ok, _ := e.health.Eligible(now); ok != e.eligible {
			return true
		}
	}
	return false
}

// publishLocked builds and publishes a snapshot.
func (s *Store) publishLocked(now time.Time) {
	order := s.sortedLocked()
	if s.idx == nil {
		s.idx = buildIndex(order)
	}
	n := len(order)
	s.version++
	sn := &Snapshot{
		Version:     s.version,
		Synced:      s.synced,
		PublishedAt: now,
		idx:         s.idx,
		all:         make([]*scheduling.Endpoint, n),
		stale:       make([]bool, n),
		rotation:    make([]rotation, n),
	}
	// An endpoint that is not scraped (NoScrape) is always fresh, so it
	// must not decide whether the others fail open: freshness fail-open is
	// judged on the scraped endpoints alone, and the unscraped ones are
	// routable beside whichever scraped ones are.
	fresh, eligible, eligibleFresh, eligibleLoadUnknown := 0, 0, 0, 0
	noScrape, eligibleNoScrape := 0, 0
	for i, e := range order {
		if e.ep == nil {
			e.ep = scheduling.NewEndpoint(e.meta, e.metrics, e.attrs)
		}
		loadUnknown := s.loadUnknownLocked(e)
		if loadUnknown {
			sn.loadUnknownCount++
		}
		unscraped := s.scraping && e.spec.NoScrape
		if unscraped {
			noScrape++
		}
		e.fresh = s.freshLocked(e, now)
		ok, reason := e.health.Eligible(now)
		e.eligible = ok
		sn.all[i] = e.ep
		sn.stale[i] = !e.fresh
		if e.fresh {
			fresh++
		} else {
			sn.staleCount++
		}
		switch {
		case !ok && reason == scheduling.IneligibleUnhealthy:
			sn.rotation[i] = rotUnhealthy
		case !ok:
			sn.rotation[i] = rotBreakerOpen
		case e.fresh:
			eligible++
			eligibleFresh++
			if unscraped {
				eligibleNoScrape++
			}
		case loadUnknown:
			eligible++
			eligibleLoadUnknown++
			sn.rotation[i] = rotStaleLoadUnknown
		default:
			eligible++
			sn.rotation[i] = rotStale // routable only when failing open
		}
	}
	sn.ineligibleCount = n - eligible
	scrapedEligible, scrapedEligibleFresh := eligible-eligibleNoScrape, eligibleFresh-eligibleNoScrape
	switch {
	case eligible == 0:
		// Nothing is routable, whatever the freshness: fail-open never
		// brings back an endpoint a health check or breaker took out.
	case eligibleFresh == n:
		sn.routable = sn.all
	case scrapedEligibleFresh > 0 || scrapedEligible == 0:
		sn.routable = make([]*scheduling.Endpoint, 0, eligibleFresh)
		for i, ep := range sn.all {
			if sn.rotation[i] == rotIn {
				sn.routable = append(sn.routable, ep)
			}
		}
	case eligibleLoadUnknown > 0 && eligibleLoadUnknown < scrapedEligible:
		// Fail-open on freshness, among the eligible whose load is
		// readable: as in Ready, the last metrics of a load-unknown
		// endpoint (zeros, if it never had a good scrape) would make it
		// look idle and win every pick.
		sn.routableFailOpen = true
		sn.routableSkipsLoadUnknown = true
		sn.routable = make([]*scheduling.Endpoint, 0, eligible-eligibleLoadUnknown)
		for i, ep := range sn.all {
			if r := sn.rotation[i]; r == rotStale || r == rotIn {
				sn.routable = append(sn.routable, ep)
			}
		}
	default:
		// Fail-open on freshness, among the eligible only (every one of
		// them, when all of their loads are unknown).
		sn.routableFailOpen = true
		if eligible == n {
			sn.routable = sn.all
		} else {
			sn.routable = make([]*scheduling.Endpoint, 0, eligible)
			for i, ep := range sn.all {
				if r := sn.rotation[i]; r == rotStale || r == rotStaleLoadUnknown || r == rotIn {
					sn.routable = append(sn.routable, ep)
				}
			}
		}
	}
	scraped, freshScraped := n-noScrape, fresh-noScrape
	switch {
	case fresh == n:
		sn.ready = sn.all
	case freshScraped > 0 || scraped == 0:
		sn.ready = make([]*scheduling.Endpoint, 0, fresh)
		for i, ep := range sn.all {
			if !sn.stale[i] {
				sn.ready = append(sn.ready, ep)
			}
		}
	case sn.loadUnknownCount > 0 && sn.loadUnknownCount < scraped:
		// Fail open, but not to endpoints whose metrics report an
		// unreadable load: their last metrics (zeros, if they never had a
		// good scrape) would make them look idle and win every pick over
		// servers whose scrapes merely time out under load.
		sn.failOpen = true
		sn.ready = make([]*scheduling.Endpoint, 0, n-sn.loadUnknownCount)
		for i, e := range order {
			if !s.loadUnknownLocked(e) {
				sn.ready = append(sn.ready, sn.all[i])
			}
		}
	default:
		// No scraped endpoint is fresh: fail open to all of them.
		sn.ready = sn.all
		sn.failOpen = true
	}
	if n > 0 {
		sn.byIP = make([]*scheduling.Endpoint, n)
		for i, j := range s.idx.ipPerm {
			sn.byIP[i] = sn.all[j]
		}
	}
	s.dirty = false
	s.snap.Store(sn)
}

func metadata(sp *EndpointSpec) scheduling.EndpointMetadata {
	return scheduling.EndpointMetadata{
		Name:      sp.Name,
		Namespace: sp.Namespace,
		Site:      sp.Site,
		PodName:   sp.PodName,
		Address:   sp.Address,
		Port:      sp.Port,
		Labels:    sp.Labels,
	}
}

func engineOf(sp *EndpointSpec, scraped string) string {
	if scraped != "" {
		return scraped
	}
	return sp.Engine
}

func makeAttrs(sp *EndpointSpec, st *EndpointStats, h *scheduling.EndpointHealth, engine string) map[string]any {
	attrs := map[string]any{
		StatsKey.Name():             st,
		WeightKey.Name():            sp.Weight,
		scheduling.HealthKey.Name(): h,
	}
	if len(sp.Models) > 0 {
		// sp.Models is the store's own copy (normalize), never changed:
		// a new spec replaces it.
		attrs[scheduling.ModelsKey.Name()] = &scheduling.EndpointModels{Entries: sp.Models}
	}
	if sp.Internal {
		attrs[scheduling.InternalKey.Name()] = true
	}
	if engine == "" {
		engine = sp.Engine
	}
	if engine != "" {
		attrs[EngineKey.Name()] = engine
	}
	if sp.ProviderTPM > 0 {
		attrs[ProviderTPMKey.Name()] = sp.ProviderTPM
	}
	if sp.ProviderRPM > 0 {
		attrs[ProviderRPMKey.Name()] = sp.ProviderRPM
	}
	return attrs
}
