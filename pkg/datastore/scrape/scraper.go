package scrape

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
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
	// Client, if set, does the requests (its transport then decides TLS
	// verification). By default the scraper uses its own transports, shared
	// by all endpoints as in GIE: 5000 idle connections, 2 per host, idle
	// connections closed after 10 s, a 10 s client timeout, no proxy, and
	// Run closes their idle connections when it returns; a given Client's
	// idle connections are the caller's to close.
	Client *http.Client
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

	client, insecureClient *http.Client
	ownTransports          []*http.Transport

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
	if opts.Client != nil {
		s.client, s.insecureClient = opts.Client, opts.Client
	} else {
		secure, insecure := newTransport(false), newTransport(true)
		s.ownTransports = []*http.Transport{secure, insecure}
		s.client = &http.Client{Transport: secure, Timeout: 10 * time.Second}
		s.insecureClient = &http.Client{Transport: insecure, Timeout: 10 * time.Second}
	}
	if err := s.SetConfig(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

func newTransport(insecure bool) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        5000,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     10 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
		// Model servers usually have self-signed certificates; GIE's
		// metrics-data-source skips verification by default.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: insecure, MinVersion: tls.VersionTLS12}, //nolint:gosec // configurable, GIE's default
	}
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
	r := &resolved{scheme: p.Scheme, path: p.Path, insecure: p.InsecureSkipVerify, extractor: cfg.Extractor}
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
// at once and then every Interval (at a random phase), at most
// MaxConcurrency at a time; endpoints added to the store start within one
// interval and removed ones stop at once (an in-flight request is
// cancelled). It also runs the store's publisher. Run returns after every
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
		for _, t := range s.ownTransports {
			t.CloseIdleConnections()
		}
	}()
	wg.Go(func() { s.store.RunPublisher(ctx, s.publishGap()) })
	workers := map[uint64]*worker{}
	gauge := time.NewTicker(250 * time.Millisecond)
	defer gauge.Stop()
	for {
		targets, changed := s.store.Targets()
		s.sync(ctx, &wg, workers, targets)
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
				s.metrics.stale.Set(float64(s.store.Snapshot().StaleCount()))
			}
		}
	}
}

// sync starts workers for new targets, updates the others' specs and stops
// the workers of removed targets.
func (s *Scraper) sync(ctx context.Context, wg *sync.WaitGroup, workers map[uint64]*worker, targets []datastore.ScrapeTarget) {
	if s.cfg.Load().extractor == nil {
		targets = nil
	}
	seen := make(map[uint64]bool, len(targets))
	for i := range targets {
		t := targets[i]
		seen[t.ID] = true
		if w := workers[t.ID]; w != nil {
			w.target.Store(&t)
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &worker{s: s, cancel: cancel, log: s.log.WithValues("endpoint", t.Key)}
		w.target.Store(&t)
		workers[t.ID] = w
		wg.Go(func() { w.run(wctx) })
		s.log.V(1).Info("Scraping endpoint", "endpoint", t.Key, "address", t.Spec.MetricsHostPort())
	}
	for id, w := range workers {
		if !seen[id] {
			w.cancel()
			delete(workers, id)
			s.log.V(1).Info("Stopped scraping endpoint", "endpoint", w.target.Load().Key)
		}
	}
	s.metrics.targets.Set(float64(len(workers)))
	s.metrics.stale.Set(float64(s.store.Snapshot().StaleCount()))
}

// worker scrapes one endpoint. Its fields other than target and cancel are
// owned by its goroutine.
type worker struct {
	s      *Scraper
	target atomic.Pointer[datastore.ScrapeTarget]
	cancel context.CancelFunc
	log    logr.Logger

	// URL cache: rebuilt when the target or configuration changes.
	urlTarget *datastore.ScrapeTarget
	urlCfg    *resolved
	url       string

	failing      bool
	lastReason   string
	lastWarning  string
	warnedEngine string
}

func (w *worker) run(ctx context.Context) {
	w.scrape(ctx)
	interval := w.s.opts.Interval
	phase := time.NewTimer(rand.N(interval) + 1)
	select {
	case <-ctx.Done():
		phase.Stop()
		return
	case <-phase.C:
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		w.scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
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

func (w *worker) urlFor(cfg *resolved, t *datastore.ScrapeTarget) string {
	if w.urlTarget != t || w.urlCfg != cfg {
		path := t.Spec.MetricsPath
		if path == "" {
			path = cfg.path
		}
		u := url.URL{Scheme: cfg.scheme, Host: t.Spec.MetricsHostPort(), Path: path}
		w.url, w.urlTarget, w.urlCfg = u.String(), t, cfg
	}
	return w.url
}

// scrape scrapes the endpoint once and reports the result, unless ctx is
// done (the endpoint was removed or the scraper stops).
func (w *worker) scrape(ctx context.Context) {
	s := w.s
	cfg := s.cfg.Load()
	if cfg.extractor == nil {
		return
	}
	t := w.target.Load()
	m := w.mapping(cfg, t)
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	start := time.Now()
	target := w.urlFor(cfg, t)
	met, err := s.fetch(ctx, cfg, target, m)
	<-s.sem
	d := time.Since(start)
	if ctx.Err() != nil {
		return
	}
	s.metrics.duration.Observe(d.Seconds())
	res := datastore.ScrapeResult{Engine: m.Name, Duration: d}
	var partial *PartialError
	reason := ""
	switch {
	case err == nil:
		res.Metrics = met
	case errors.As(err, &partial):
		res.Metrics = met
		res.Warning = partial.Error()
	default:
		reason = classify(err)
		s.metrics.errors.WithLabelValues(reason).Inc()
		res.Err = err
	}
	s.store.ReportScrape(t.ID, res)
	w.logTransition(target, reason, err, res.Warning)
}

func (w *worker) logTransition(target, reason string, err error, warning string) {
	switch {
	case reason != "" && !w.failing:
		w.log.Error(err, "Scraping metrics failed; the endpoint is stale until a scrape succeeds", "url", target, "reason", reason)
	case reason != "" && reason != w.lastReason:
		w.log.V(1).Info("Scraping metrics still fails, for another reason", "url", target, "reason", reason, "error", err.Error())
	case reason == "" && w.failing:
		w.log.Info("Scraping metrics recovered", "url", target)
	}
	w.failing, w.lastReason = reason != "", reason
	if reason == "" && warning != w.lastWarning {
		if warning != "" {
			w.log.V(1).Info("Some metrics could not be read", "url", target, "problems", warning)
		} else {
			w.log.V(1).Info("All metrics are read again", "url", target)
		}
		w.lastWarning = warning
	}
	if reason == "" && w.log.V(5).Enabled() {
		w.log.V(5).Info("Scraped metrics", "url", target)
	}
}

// errBodyTooLarge marks a body over Options.MaxBodyBytes.
var errBodyTooLarge = errors.New("metrics body too large")

// statusError is a non-200 answer.
type statusError struct{ code int }

func (e *statusError) Error() string {
	return fmt.Sprintf("unexpected HTTP status %d %s", e.code, http.StatusText(e.code))
}

// fetch gets and parses one endpoint's metrics.
func (s *Scraper) fetch(ctx context.Context, cfg *resolved, target string, m coremetrics.EngineMapping) (scheduling.Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return scheduling.Metrics{}, fmt.Errorf("build request for %s: %w", target, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	client := s.client
	if cfg.insecure {
		client = s.insecureClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return scheduling.Metrics{}, err
	}
	defer func() {
		// Drain a little so the connection can be reused, then close.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return scheduling.Metrics{}, &statusError{code: resp.StatusCode}
	}
	body := &limitedReader{r: resp.Body, n: s.opts.MaxBodyBytes}
	met, err := ParseMetrics(body, m)
	if body.exceeded {
		return scheduling.Metrics{}, fmt.Errorf("%w: metrics body exceeds %d bytes", errBodyTooLarge, s.opts.MaxBodyBytes)
	}
	var partial *PartialError
	if err != nil && ctx.Err() != nil && !errors.As(err, &partial) {
		// The body was cut by the timeout.
		return scheduling.Metrics{}, fmt.Errorf("read metrics body: %w", ctx.Err())
	}
	return met, err
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
	case errors.Is(err, ErrMalformed):
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
