package scrape

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/metricssource"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Defaults of Options.
const (
	// DefaultInterval is GIE's --refresh-metrics-interval.
	DefaultInterval = 50 * time.Millisecond
	// DefaultTimeout is GIE's per-poll timeout.
	DefaultTimeout = time.Second
	// DefaultMaxBodyBytes bounds a /metrics body.
	DefaultMaxBodyBytes = 16 << 20
	// DefaultMaxConcurrency bounds simultaneous scrapes.
	DefaultMaxConcurrency = 64
	// DefaultMaxBackoff caps the back-off of a failing endpoint. A failing
	// endpoint then costs one request (up to MaxBodyBytes read) every 5 s
	// instead of 20 a second, and a recovered one is routed to again
	// within 5 s plus an interval: less than a Kubernetes readiness probe
	// period (10 s by default) and of the order of the default staleness
	// threshold (2 s), so recovery is not noticeably slower than a pod
	// becoming ready.
	DefaultMaxBackoff = 5 * time.Second
)

// Config is what the EndpointPickerConfig says about scraping; it can
// change on a configuration reload (SetConfig).
type Config struct {
	// Source holds the metrics-data-source settings (Settings()). An empty
	// Scheme means "http", an empty Path "/metrics".
	Source metricssource.Params
	// Extractor maps metric names per engine. Nil means the data layer is
	// disabled: nothing is scraped and the store treats every endpoint as
	// ready.
	Extractor *coremetrics.Extractor
}

// Options are the scraper's fixed settings (flags).
type Options struct {
	// Interval between two scrapes of one endpoint
	// (--refresh-metrics-interval); 0 means DefaultInterval.
	Interval time.Duration
	// Timeout of one scrape, body included; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxBodyBytes bounds a decompressed /metrics body; a larger one fails
	// the scrape. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxConcurrency bounds simultaneous scrapes over all endpoints; 0
	// means DefaultMaxConcurrency.
	MaxConcurrency int
	// MaxBackoff caps the wait between two scrapes of a failing endpoint
	// (see the package documentation): after n consecutive failed scrapes,
	// or scrapes that left the load unknown, the next one comes
	// Interval×2^(n-1) later, less a random jitter of up to a quarter,
	// capped at MaxBackoff. It bounds how long a recovered endpoint waits
	// to be scraped, hence routed to, again. 0 means DefaultMaxBackoff; a
	// value below Interval means Interval (no back-off).
	MaxBackoff time.Duration
	// RoundSize bounds how many endpoints one scrape round wakes at once
	// (see the package documentation); 0 means DefaultRoundSize, 1 gives
	// every endpoint a phase of its own.
	RoundSize int
	// Logger receives scrape failures and recoveries (once per transition)
	// and per-change logs at V(1). The zero value discards.
	Logger logr.Logger
	// Registerer receives the scraper's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// resolved is a validated Config.
type resolved struct {
	scheme, path string
	insecure     bool
	nameFilter   bool
	extractor    *coremetrics.Extractor
	engines      map[string]coremetrics.EngineMapping
}

// Scraper polls every endpoint's Prometheus metrics, maps them with the
// core-metrics-extractor and reports the results to a datastore.Store. It
// also runs the store's publisher. Create it with NewScraper and run it
// with Run.
type Scraper struct {
	store   *datastore.Store
	opts    Options
	log     logr.Logger
	metrics *scraperMetrics

	cfg   atomic.Pointer[resolved]
	cfgCh chan struct{}

	sem     chan struct{}
	running atomic.Bool
}

// NewScraper returns a scraper for store. It enables freshness tracking in
// the store when cfg has an extractor.
func NewScraper(store *datastore.Store, cfg Config, opts Options) (*Scraper, error) {
	if store == nil {
		return nil, errors.New("scrape: nil store")
	}
	switch {
	case opts.Interval < 0:
		return nil, fmt.Errorf("scrape: interval must be positive, got %v", opts.Interval)
	case opts.Timeout < 0:
		return nil, fmt.Errorf("scrape: timeout must be positive, got %v", opts.Timeout)
	case opts.MaxBodyBytes < 0:
		return nil, fmt.Errorf("scrape: max body bytes must be positive, got %d", opts.MaxBodyBytes)
	case opts.MaxConcurrency < 0:
		return nil, fmt.Errorf("scrape: max concurrency must be positive, got %d", opts.MaxConcurrency)
	case opts.MaxBackoff < 0:
		return nil, fmt.Errorf("scrape: max backoff must be positive, got %v", opts.MaxBackoff)
	case opts.RoundSize < 0:
		return nil, fmt.Errorf("scrape: round size must be positive, got %d", opts.RoundSize)
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxConcurrency == 0 {
		opts.MaxConcurrency = DefaultMaxConcurrency
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.RoundSize == 0 {
		opts.RoundSize = DefaultRoundSize
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.Interval)
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("scrape: register metrics: %w", err)
	}
	s := &Scraper{
		store:   store,
		opts:    opts,
		log:     opts.Logger,
		metrics: m,
		cfgCh:   make(chan struct{}, 1),
		sem:     make(chan struct{}, opts.MaxConcurrency),
	}
	if err := s.SetConfig(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// SetConfig swaps the scrape settings and extractor (a configuration
// reload); scrapes that start afterwards use them. A nil extractor stops
// scraping and disables freshness tracking in the store. An invalid source
// is refused and the previous configuration kept.
func (s *Scraper) SetConfig(cfg Config) error {
	p := cfg.Source
	if p.Scheme == "" {
		p.Scheme = "http"
	}
	if p.Path == "" {
		p.Path = "/metrics"
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("scrape: invalid metrics source: %w", err)
	}
	r := &resolved{scheme: p.Scheme, path: p.Path, insecure: p.InsecureSkipVerify, nameFilter: p.NameFilter, extractor: cfg.Extractor}
	if cfg.Extractor != nil {
		r.engines = cfg.Extractor.Engines()
	}
	s.cfg.Store(r)
	s.store.SetScrapingEnabled(cfg.Extractor != nil)
	select {
	case s.cfgCh <- struct{}{}:
	default:
	}
	return nil
}

// publishGap is the store publisher's minimum gap: a fifth of the
// interval, so a result is visible well within one interval.
func (s *Scraper) publishGap() time.Duration {
	return min(max(s.opts.Interval/5, time.Millisecond), 100*time.Millisecond)
}

// Run scrapes until ctx is done: one goroutine per endpoint, each scraping
// at once and then every Interval in its round (rounds.go: one timer
// goroutine per round, ticking its members), backing off while
// the endpoint fails (Options.MaxBackoff), at most MaxConcurrency at a
// time; endpoints added to the store start within one interval and removed
// ones stop at once (an in-flight request is cancelled). A configuration
// change (SetConfig) or a change of an endpoint's metrics address, path,
// engine or labels ends the back-off: the next scrape comes within one
// interval. It also runs the store's publisher. Run returns after every
// goroutine it started has stopped; a second concurrent Run returns at
// once.
func (s *Scraper) Run(ctx context.Context) {
	if !s.running.CompareAndSwap(false, true) {
		s.log.Error(errors.New("already running"), "Scraper.Run called twice")
		return
	}
	defer s.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { s.store.RunPublisher(ctx, s.publishGap()) })
	rs := newRounds(ctx, &wg, s.opts.Interval, s.opts.RoundSize)
	workers := map[uint64]*worker{}
	gauge := time.NewTicker(250 * time.Millisecond)
	defer gauge.Stop()
	lastCfg := s.cfg.Load()
	for {
		targets, changed := s.store.Targets()
		cfg := s.cfg.Load()
		s.sync(ctx, &wg, rs, workers, targets, cfg != lastCfg)
		lastCfg = cfg
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				break wait
			case <-s.cfgCh:
				break wait
			case <-gauge.C:
				s.setGauges()
			}
		}
	}
}

// setGauges sets the gauges read from the published snapshot.
func (s *Scraper) setGauges() {
	sn := s.store.Snapshot()
	s.metrics.stale.Set(float64(sn.StaleCount()))
	s.metrics.loadUnknown.Set(float64(sn.LoadUnknownCount()))
}

// sync starts workers for new targets, updates the others' specs and stops
// the workers of removed targets. Workers whose target's scrape settings
// changed, or all of them when the configuration changed, leave their
// back-off.
func (s *Scraper) sync(ctx context.Context, wg *sync.WaitGroup, rs *rounds, workers map[uint64]*worker, targets []datastore.ScrapeTarget, cfgChanged bool) {
	if s.cfg.Load().extractor == nil {
		targets = nil
	}
	seen := make(map[uint64]bool, len(targets))
	for i := range targets {
		t := targets[i]
		seen[t.ID] = true
		if w := workers[t.ID]; w != nil {
			old := w.target.Swap(&t)
			if cfgChanged || !sameScrape(&old.Spec, &t.Spec) {
				w.resetBackoff()
			}
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &worker{s: s, cancel: cancel, log: s.log.WithValues("endpoint", t.Key), reset: make(chan struct{}, 1), tick: make(chan struct{}, 1)}
		w.target.Store(&t)
		workers[t.ID] = w
		rs.join(w)
		wg.Go(func() { w.run(wctx) })
		s.log.V(1).Info("Scraping endpoint", "endpoint", t.Key, "address", t.Spec.MetricsHostPort())
	}
	for id, w := range workers {
		if !seen[id] {
			w.cancel()
			rs.leave(w)
			delete(workers, id)
			s.log.V(1).Info("Stopped scraping endpoint", "endpoint", w.target.Load().Key)
		}
	}
	s.metrics.targets.Set(float64(len(workers)))
	s.setGauges()
}

// sameScrape reports whether two specs of one endpoint are scraped alike
// (same metrics address and path, same engine choice).
func sameScrape(a, b *datastore.EndpointSpec) bool {
	return a.MetricsHostPort() == b.MetricsHostPort() && a.MetricsPath == b.MetricsPath &&
		a.Engine == b.Engine && maps.Equal(a.Labels, b.Labels)
}

// worker scrapes one endpoint. Its fields other than target, cancel,
// reset and tick are owned by its goroutine.
type worker struct {
	s      *Scraper
	target atomic.Pointer[datastore.ScrapeTarget]
	cancel context.CancelFunc
	log    logr.Logger
	// reset (capacity 1) asks the goroutine to leave its back-off.
	reset chan struct{}
	// tick (capacity 1) is the worker's round: it says that a scrape is
	// due (rounds.go).
	tick chan struct{}

	// Request cache: rebuilt when the metrics address or path, the
	// configuration or the engine changes.
	reqKey requestKey
	// whole asks for the whole body, filtered (nil without the name
	// filter) for the mapping's families; wholeBody is set when the
	// endpoint answered the filtered request without the families that
	// its whole body has (client_python in multiprocess mode).
	whole, filtered *scrapeRequest
	wholeBody       bool

	// conn is the worker's connection to its endpoint (conn.go).
	conn endpointConn

	// last is the last parse, reused while the wanted lines do not change.
	last lastParse
	// warnedRedirect: the redirect of the metrics URL was logged.
	warnedRedirect bool

	// failures counts consecutive scrapes that failed or left the load
	// unknown; it sets the back-off.
	failures int

	// Log state: the last scrape's state and its reason (the error
	// reason, or LoadUnknownError.Kinds).
	state        scrapeState
	lastReason   string
	lastWarning  string
	warnedEngine string
}

// scrapeState is the outcome of a worker's last scrape, for logging
// transitions.
type scrapeState int

const (
	stateOK          scrapeState = iota // metrics and load read
	stateFailing                        // the scrape failed (ScrapeResult.Err)
	stateLoadUnknown                    // metrics read, load unknown (ScrapeResult.LoadUnknown)
)

// resetBackoff asks the worker to leave its back-off; it never blocks.
func (w *worker) resetBackoff() {
	select {
	case w.reset <- struct{}{}:
	default:
	}
}

// run scrapes at once, then at every tick of its round; after a failed
// scrape (or one that left the load unknown) it waits the back-off
// instead, counted from the end of that scrape, and ignores the ticks
// until a scrape succeeds again. A tick that came while a scrape was in
// flight (it took longer than the interval) starts the next one at once.
func (w *worker) run(ctx context.Context) {
	// The endpoint's removal or the scraper's stop interrupts a scrape in
	// flight; the connection closes when run returns.
	stop := context.AfterFunc(ctx, w.conn.interrupt)
	defer func() {
		stop()
		w.conn.close()
	}()
	// The back-off timer runs (armed) only after a failed scrape.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	interval := w.s.opts.Interval
	// scrape scrapes once. A tick pending from before it is spent by it;
	// one that came during it means it overran, unless it did not start on
	// a tick (the first scrape, one after a back-off) and took less than
	// an interval: that tick is only the round passing by, and the next
	// scrape comes with the round after it.
	scrape := func(onTick bool) {
		drainTick(w.tick)
		start := time.Now()
		w.scrape(ctx)
		if !onTick && time.Since(start) < interval {
			drainTick(w.tick)
		}
		if armed = w.failures > 0; armed {
			timer.Reset(w.backoff())
		}
	}
	scrape(false)
	for {
		var backoff <-chan time.Time
		if armed {
			backoff = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-w.reset:
			// The next scrape comes with the round: within one interval.
			w.failures = 0
			timer.Stop()
			armed = false
		case <-w.tick:
			if !armed {
				scrape(true)
			}
		case <-backoff:
			scrape(false)
		}
	}
}

// drainTick takes a pending tick, if any.
func drainTick(tick chan struct{}) {
	select {
	case <-tick:
	default:
	}
}

// backoff is the wait after w.failures consecutive failures (at least 1):
// Interval×2^(failures-1), capped at MaxBackoff, less a random jitter of
// up to a quarter so that endpoints failing together do not stay in step.
func (w *worker) backoff() time.Duration {
	return backoffDelay(w.s.opts.Interval, w.s.opts.MaxBackoff, w.failures, rand.N[time.Duration])
}

// backoffDelay computes the back-off; randN(n) returns a value in [0, n).
func backoffDelay(interval, maxBackoff time.Duration, failures int, randN func(time.Duration) time.Duration) time.Duration {
	d := interval
	for i := 1; i < failures && d < maxBackoff; i++ {
		if d > maxBackoff/2 {
			d = maxBackoff // and no overflow
			break
		}
		d *= 2
	}
	d = min(d, maxBackoff)
	return d - randN(d/4+1)
}

// mapping chooses the endpoint's engine mapping: its spec's engine when the
// extractor knows it, else the extractor's choice from its labels.
func (w *worker) mapping(cfg *resolved, t *datastore.ScrapeTarget) coremetrics.EngineMapping {
	if e := t.Spec.Engine; e != "" {
		if m, ok := cfg.engines[e]; ok {
			return m
		}
		if w.warnedEngine != e {
			w.warnedEngine = e
			w.log.Info("Unknown engine in the endpoint's spec; choosing the engine from its labels", "engine", e)
		}
	}
	return cfg.extractor.MappingFor(t.Spec.Labels)
}

// request is the endpoint's metrics request; with the source's nameFilter it
// asks for only the families m reads (name[]=… per family, sorted, as
// Prometheus client_python's exposition understands it), unless the
// endpoint answered such a request without them (w.wholeBody).
func (w *worker) request(cfg *resolved, t *datastore.ScrapeTarget, m *coremetrics.EngineMapping) *scrapeRequest {
	path := t.Spec.MetricsPath
	if path == "" {
		path = cfg.path
	}
	key := requestKey{hostPort: t.Spec.MetricsHostPort(), path: path, cfg: cfg, engine: m.Name}
	if w.reqKey != key {
		u := url.URL{Scheme: cfg.scheme, Host: t.Spec.MetricsHostPort(), Path: path}
		w.whole = newScrapeRequest(&u, cfg.insecure)
		w.filtered = nil
		if cfg.nameFilter {
			if names := WantedFamilies(m); len(names) > 0 {
				u.RawQuery = url.Values{NameFilterParam: names}.Encode()
				w.filtered = newScrapeRequest(&u, cfg.insecure)
			}
		}
		// A new address, path, configuration or engine asks with the
		// filter again (a store sync that hands the worker an unchanged
		// target does not).
		w.reqKey, w.wholeBody = key, false
	}
	if w.filtered != nil && !w.wholeBody {
		return w.filtered
	}
	return w.whole
}

// requestKey identifies what a worker's requests were built from.
type requestKey struct {
	hostPort, path string
	cfg            *resolved
	engine         string
}

// lastParseKey identifies the mapping a lastParse was made with.
type lastParseKey struct {
	cfg    *resolved
	engine string
}

// scrape scrapes the endpoint once and reports the result, unless ctx is
// done (the endpoint was removed or the scraper stops). It reports false
// when the scrape failed or left the load unknown.
func (w *worker) scrape(ctx context.Context) bool {
	s := w.s
	cfg := s.cfg.Load()
	if cfg.extractor == nil {
		return true
	}
	t := w.target.Load()
	m := w.mapping(cfg, t)
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return true
	}
	start := time.Now()
	req := w.request(cfg, t, &m)
	target := req.url
	w.last.reset(lastParseKey{cfg: cfg, engine: m.Name})
	met, err := s.fetch(ctx, w, req, m)
	<-s.sem
	d := time.Since(start)
	if ctx.Err() != nil {
		return true
	}
	s.metrics.duration.Observe(d.Seconds())
	res := datastore.ScrapeResult{Engine: m.Name, Duration: d}
	var partial *PartialError
	var unknown *LoadUnknownError
	state, reason := stateOK, ""
	switch {
	case err == nil:
		res.Metrics = met
	case errors.As(err, &partial):
		res.Metrics = met
		res.Warning = partial.Error()
	case errors.As(err, &unknown):
		state, reason = stateLoadUnknown, unknown.Kinds()
		res.LoadUnknown = unknown.Reason()
		for _, p := range unknown.Problems {
			s.metrics.invalid.WithLabelValues(p.Metric).Inc()
		}
	default:
		state, reason = stateFailing, classify(err)
		s.metrics.errors.WithLabelValues(reason).Inc()
		res.Err = err
	}
	s.store.ReportScrape(t.ID, res)
	w.logTransition(target, state, reason, err, res)
	if state != stateOK {
		w.failures++
		return false
	}
	w.failures = 0
	return true
}

// logTransition logs a change of the worker's state: into a failure or an
// unknown load (error), a change of reason within one (V(1)), and the way
// back (info).
func (w *worker) logTransition(target string, state scrapeState, reason string, err error, res datastore.ScrapeResult) {
	warning := res.Warning
	prev := w.state
	switch {
	case state == stateFailing && prev != stateFailing:
		w.log.Error(err, "Scraping metrics failed; the endpoint is stale until a scrape succeeds", "url", target, "reason", reason)
	case state == stateFailing && reason != w.lastReason:
		w.log.V(1).Info("Scraping metrics still fails, for another reason", "url", target, "reason", reason, "error", err.Error())
	case state == stateLoadUnknown && prev != stateLoadUnknown:
		w.log.Error(err, "The endpoint's load cannot be read; it is stale until its load metrics are valid", "url", target, "loadUnknown", res.LoadUnknown)
	case state == stateLoadUnknown && reason != w.lastReason:
		w.log.V(1).Info("The endpoint's load still cannot be read, for another reason", "url", target, "loadUnknown", res.LoadUnknown)
	case state == stateOK && prev == stateFailing:
		w.log.Info("Scraping metrics recovered", "url", target)
	case state == stateOK && prev == stateLoadUnknown:
		w.log.Info("The endpoint's load can be read again", "url", target)
	}
	w.state, w.lastReason = state, reason
	if state == stateOK && warning != w.lastWarning {
		if warning != "" {
			w.log.V(1).Info("Some metrics could not be read", "url", target, "problems", warning)
		} else {
			w.log.V(1).Info("All metrics are read again", "url", target)
		}
		w.lastWarning = warning
	}
	if state == stateOK && w.log.V(5).Enabled() {
		w.log.V(5).Info("Scraped metrics", "url", target)
	}
}

// errBodyTooLarge marks a body over Options.MaxBodyBytes.
var errBodyTooLarge = errors.New("metrics body too large")

// statusError is a non-200 answer.
type statusError struct {
	code   int
	detail string // why a redirect was not followed
}

func (e *statusError) Error() string {
	msg := fmt.Sprintf("unexpected HTTP status %d %s", e.code, http.StatusText(e.code))
	if e.detail != "" {
		msg += ": " + e.detail
	}
	return msg
}

// maxRedirects bounds the redirects followed in one scrape.
const maxRedirects = 3

// fetch gets and parses one endpoint's metrics over the worker's
// connection. A filtered request answered without the families the
// mapping reads is asked again whole, and the worker keeps asking whole
// (see worker.request).
func (s *Scraper) fetch(ctx context.Context, w *worker, req *scrapeRequest, m coremetrics.EngineMapping) (scheduling.Metrics, error) {
	deadline := time.Now().Add(s.opts.Timeout)
	met, err := s.fetchOnce(ctx, w, req, m, deadline)
	if w.filtered == nil || req != w.filtered || !missingFamilies(err) || ctx.Err() != nil {
		return met, err
	}
	wmet, werr := s.fetchOnce(ctx, w, w.whole, m, deadline)
	if readWithFamilies(werr) {
		w.wholeBody = true
		w.log.Info("The model server answers a name[]-filtered /metrics without metrics its whole /metrics has (Prometheus client_python in multiprocess mode does); scraping its whole /metrics from now on",
			"url", w.whole.url, "filteredError", err.Error())
	}
	return wmet, werr
}

// readWithFamilies reports a body that was read and has the mapping's
// metrics (some may be unusable, none of the load metrics is absent).
func readWithFamilies(err error) bool {
	if err == nil {
		return true
	}
	if _, ok := errors.AsType[*PartialError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*LoadUnknownError](err); ok {
		return !missingFamilies(err)
	}
	return false
}

// missingFamilies reports an answer without the mapping's metrics, or
// without one of its load metrics.
func missingFamilies(err error) bool {
	if errors.Is(err, ErrNoMetrics) {
		return true
	}
	if lu, ok := errors.AsType[*LoadUnknownError](err); ok {
		for _, p := range lu.Problems {
			if p.Kind == ProblemAbsent {
				return true
			}
		}
	}
	return false
}

// fetchOnce is one request, following redirects to the same scheme, host
// and port (up to maxRedirects), as GIE's HTTP client follows them.
func (s *Scraper) fetchOnce(ctx context.Context, w *worker, req *scrapeRequest, m coremetrics.EngineMapping, deadline time.Time) (scheduling.Metrics, error) {
	resp, err := w.conn.get(ctx, req, deadline)
	for redirects := 0; err == nil && isRedirect(resp.StatusCode); redirects++ {
		next, why := redirectTarget(req, resp)
		w.conn.drain(resp)
		if why == "" && redirects == maxRedirects {
			why = fmt.Sprintf("more than %d redirects", maxRedirects)
		}
		if why != "" {
			return scheduling.Metrics{}, &statusError{code: resp.StatusCode, detail: why}
		}
		if !w.warnedRedirect {
			w.warnedRedirect = true
			w.log.Info("The metrics URL redirects; set the metrics path to the target to save a request per scrape", "url", req.url, "location", next.url)
		}
		req = next
		resp, err = w.conn.get(ctx, req, deadline)
	}
	if err != nil {
		return scheduling.Metrics{}, err
	}
	if resp.StatusCode != http.StatusOK {
		// Not worth draining: failures back off, and a new connection
		// costs less than reading an error page.
		w.conn.close()
		return scheduling.Metrics{}, &statusError{code: resp.StatusCode}
	}
	body, err := responseBody(resp)
	if err != nil {
		w.conn.close()
		return scheduling.Metrics{}, err
	}
	lr := &limitedReader{r: body, n: s.opts.MaxBodyBytes}
	met, err := parseMetrics(lr, m, &w.last)
	w.conn.finish(resp, !lr.exceeded)
	if lr.exceeded {
		return scheduling.Metrics{}, fmt.Errorf("%w: metrics body exceeds %d bytes", errBodyTooLarge, s.opts.MaxBodyBytes)
	}
	return met, err
}

// portOf is u's port, the scheme's default when it has none.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// redirectTarget is the request a redirect points to, or why it is not
// followed.
func redirectTarget(req *scrapeRequest, resp *http.Response) (*scrapeRequest, string) {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil, "redirect without a Location"
	}
	base, err := url.Parse(req.url)
	if err != nil {
		return nil, "bad request URL"
	}
	u, err := base.Parse(loc)
	if err != nil {
		return nil, fmt.Sprintf("bad Location %q", loc)
	}
	if u.Scheme != base.Scheme || !strings.EqualFold(u.Hostname(), base.Hostname()) || portOf(u) != portOf(base) {
		return nil, fmt.Sprintf("redirect to %s not followed: only redirects to the same scheme, host and port are; set the metrics scheme and port", u.Redacted())
	}
	u.Fragment = ""
	return newScrapeRequest(u, req.insecure), ""
}

// classify maps a scrape error to a reason label.
func classify(err error) string {
	var se *statusError
	var ne net.Error
	switch {
	case errors.Is(err, errBodyTooLarge):
		return ReasonBodyTooLarge
	case errors.As(err, &se):
		return ReasonHTTPStatus
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	case errors.Is(err, ErrNoMetrics):
		return ReasonMissingMetrics
	case errors.Is(err, ErrMalformed), errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader):
		return ReasonParse
	}
	return ReasonConnect
}

// limitedReader reads at most n bytes and then fails, remembering that the
// limit was exceeded.
type limitedReader struct {
	r        io.Reader
	n        int64
	exceeded bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// Probe one byte to tell "exactly n bytes" from "more than n".
		var one [1]byte
		k, err := l.r.Read(one[:])
		if k > 0 {
			l.exceeded = true
			return 0, errBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	return k, err
}
