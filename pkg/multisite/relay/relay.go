package relay

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// Clock reads the time; tests give a fake one.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Options are the relay's collaborators; every field is optional.
type Options struct {
	// Logger logs state changes: a scrape or a peer starting to fail
	// (error), recovering (info), and details at V(1).
	Logger logr.Logger
	// Registry receives the relay's metrics and is served on /metrics; a
	// new registry when nil.
	Registry *prometheus.Registry
	// Clock stamps rows and answers; the wall clock when nil.
	Clock Clock
}

// Relay is one site-relay. New builds it, Listen binds its ports, Run
// serves until its context ends.
type Relay struct {
	cfg   *Config
	log   logr.Logger
	clock Clock
	reg   *prometheus.Registry
	m     *relayMetrics

	cert     *tlsutil.Reloader
	ca       *tlsutil.CABundle // nil without tls.caFile
	verifier tlsutil.PeerVerifier
	targets  []*scrapeTarget
	peers    []*peerState

	mu        sync.Mutex // guards providers' and peers' state below
	providers []*providerState

	signalsLis, adminLis net.Listener
	signalsSrv, adminSrv *http.Server
	ready                chan struct{} // closed once Run serves
}

// providerState is what the relay knows of one of its site's providers.
type providerState struct {
	cfg        Provider
	last       *batch    // the last scrape that read any series
	started    time.Time // when the relay was built: the window start while last is nil
	lastScrape time.Time // the last scrape attempt that ended
	generation uint64    // of the last qualified batch; 0 before
	cond       Condition // MetricsAvailable
}

// New checks the configuration (cfg must have been defaulted and
// validated: Config.SetDefaults, Config.Validate), loads the certificates
// and builds the scrape and poll clients. It starts nothing.
func New(cfg *Config, opts Options) (*Relay, error) {
	if cfg == nil {
		return nil, errors.New("relay: nil configuration")
	}
	if _, err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, log: opts.Logger, clock: opts.Clock, reg: opts.Registry, ready: make(chan struct{})}
	if r.log.GetSink() == nil {
		r.log = logr.Discard()
	}
	if r.clock == nil {
		r.clock = realClock{}
	}
	if r.reg == nil {
		r.reg = prometheus.NewRegistry()
	}
	m, err := newRelayMetrics(r.reg, cfg)
	if err != nil {
		return nil, err
	}
	r.m = m
	cert, err := tlsutil.NewFileReloader(cfg.TLS.CertFile, cfg.TLS.KeyFile, r.log.WithName("tls"), tlsutil.WithRegisterer(r.reg), tlsutil.WithPurpose(tlsutil.PurposeRelayServer))
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	r.cert = cert
	var roots func() *x509.CertPool
	if cfg.TLS.CAFile != "" {
		ca, err := tlsutil.NewCABundle(cfg.TLS.CAFile, r.log.WithName("ca"), tlsutil.WithRegisterer(r.reg), tlsutil.WithPurpose(tlsutil.PurposeRelayServer))
		if err != nil {
			return nil, fmt.Errorf("tls.caFile: %w", err)
		}
		r.ca = ca
		roots = ca.Pool
	}
	// Clients: index 0 is the local EPP, then every peer in order.
	r.verifier = tlsutil.PeerVerifier{
		Accept: append([]tlsutil.Identity{cfg.LocalEPP.Identity}, identitiesOf(cfg.Peers)...),
		Roots:  roots,
		Usage:  x509.ExtKeyUsageClientAuth,
	}
	now := r.clock.Now()
	byKey := map[string]*scrapeTarget{}
	for i, p := range cfg.Providers {
		ps := &providerState{cfg: p, started: now}
		if p.MetricsConfig == nil {
			ps.cond = newCondition(now, "False", "NoMetricsConfig", "the provider has no metricsConfig: it publishes no load (G-47)")
		} else {
			ps.cond = newCondition(now, "Unknown", "Pending", "not scraped yet")
		}
		r.providers = append(r.providers, ps)
		mc := p.MetricsConfig
		if mc == nil {
			continue
		}
		key := fmt.Sprintf("%s\x00%s\x00%+v", mc.Endpoint, mc.BearerTokenFile, mc.TLS)
		t := byKey[key]
		if t == nil {
			client, bundle, err := newScrapeClient(mc, cfg.ScrapeTimeout, r.log.WithName("scrape-ca"))
			if err != nil {
				return nil, fmt.Errorf("providers[%d].metricsConfig.tls.caFile: %w", i, err)
			}
			t = &scrapeTarget{endpoint: mc.Endpoint, tokenFile: mc.BearerTokenFile, client: client, ca: bundle}
			if _, err := t.bearer(); err != nil {
				return nil, fmt.Errorf("providers[%d].metricsConfig.bearerTokenFile: %w", i, err)
			}
			byKey[key] = t
			r.targets = append(r.targets, t)
		}
		t.providers = append(t.providers, i)
	}
	for _, p := range cfg.Peers {
		r.peers = append(r.peers, newPeerState(p, cfg, r.cert.GetClientCertificate, roots))
	}
	return r, nil
}

// Listen binds the signals port (mutual TLS) and the admin port (health,
// status, metrics). Run calls it when it was not called before.
func (r *Relay) Listen() error {
	if r.signalsLis != nil {
		return nil
	}
	sl, err := net.Listen("tcp", r.cfg.ListenAddress)
	if err != nil {
		return fmt.Errorf("listenAddress: %w", err)
	}
	al, err := net.Listen("tcp", r.cfg.AdminAddress)
	if err != nil {
		_ = sl.Close()
		return fmt.Errorf("adminAddress: %w", err)
	}
	r.signalsLis, r.adminLis = newLimitListener(sl, maxConnections), newLimitListener(al, maxConnections)
	return nil
}

// SignalsAddr and AdminAddr return the bound addresses (after Listen).
func (r *Relay) SignalsAddr() string { return r.signalsLis.Addr().String() }

// AdminAddr returns the admin port's bound address (after Listen).
func (r *Relay) AdminAddr() string { return r.adminLis.Addr().String() }

// Ready is closed once Run serves.
func (r *Relay) Ready() <-chan struct{} { return r.ready }

// HTTP server bounds.
const (
	maxConnections    = 256
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 10 * time.Second
	idleTimeout       = time.Minute
	maxHeaderBytes    = 16 << 10
	shutdownTimeout   = 5 * time.Second
)

// Run serves until ctx is done: the signals and admin servers, the scrape
// loop (every scrapeInterval, the first at once), the peer poll loop
// (every peerPollInterval, the first round at once) and the certificate
// and CA watchers. Every goroutine it starts has stopped when it returns.
// It returns an error when a server fails; nil once ctx is done. Call Run
// or Serve once.
func (r *Relay) Run(ctx context.Context) error { return r.run(ctx, true) }

// Serve is Run without the scrape and poll loops: for a caller that drives
// ScrapeOnce and PollRound itself (tests with a fake clock, a custom
// schedule).
func (r *Relay) Serve(ctx context.Context) error { return r.run(ctx, false) }

func (r *Relay) run(ctx context.Context, loops bool) error {
	if err := r.Listen(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.signalsSrv = &http.Server{
		Handler:           http.HandlerFunc(r.serveSignals),
		TLSConfig:         tlsutil.MutualServerConfig(r.cert.GetCertificate, nil),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          httpErrorLog(r.log.WithName("signals-server")),
	}
	r.adminSrv = &http.Server{
		Handler:           r.AdminHandler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          httpErrorLog(r.log.WithName("admin-server")),
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	serve := func(name string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("%s server: %w", name, err)
				cancel()
			}
		})
	}
	serve("signals", func() error { return r.signalsSrv.ServeTLS(r.signalsLis, "", "") })
	serve("admin", func() error { return r.adminSrv.Serve(r.adminLis) })
	wg.Go(func() { r.cert.Run(ctx) })
	if r.ca != nil {
		wg.Go(func() { r.ca.Run(ctx) })
	}
	for _, t := range r.targets {
		if t.ca != nil {
			wg.Go(func() { t.ca.Run(ctx) })
		}
	}
	if loops {
		wg.Go(func() { r.loop(ctx, r.cfg.ScrapeInterval, r.ScrapeOnce) })
		if len(r.peers) > 0 {
			wg.Go(func() { r.loop(ctx, r.cfg.PeerPollInterval, r.PollRound) })
		}
	}
	r.log.Info("site-relay serving", "site", r.cfg.Site, "cluster", r.cfg.Cluster, "signals", r.SignalsAddr(), "admin", r.AdminAddr(),
		"providers", len(r.providers), "peers", len(r.peers), "scrapeInterval", r.cfg.ScrapeInterval, "peerPollInterval", r.cfg.PeerPollInterval)
	close(r.ready)
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	_ = r.signalsSrv.Shutdown(sctx)
	_ = r.adminSrv.Shutdown(sctx)
	wg.Wait()
	for _, p := range r.peers {
		p.client.CloseIdleConnections()
	}
	for _, t := range r.targets {
		t.client.CloseIdleConnections()
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// loop calls step at once and then every interval until ctx is done; a
// step that overruns the interval delays the next one (no burst).
func (r *Relay) loop(ctx context.Context, interval time.Duration, step func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ScrapeOnce scrapes every metrics endpoint once (concurrently, each
// bounded by scrapeTimeout) and records the batches. Run calls it every
// scrapeInterval; tests call it directly with a fake clock.
func (r *Relay) ScrapeOnce(ctx context.Context) {
	results := make([]scrapeResult, len(r.targets))
	var wg sync.WaitGroup
	for i, t := range r.targets {
		names := make([]string, len(t.providers))
		for j, pi := range t.providers {
			names[j] = r.providers[pi].cfg.Name
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, r.cfg.ScrapeTimeout)
			defer cancel()
			results[i] = t.scrape(sctx, names, r.clock.Now)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: a cancelled scrape is no failure
	}
	now := r.clock.Now()
	for i, t := range r.targets {
		r.applyScrape(t, results[i], now)
	}
}

// applyScrape records one target's scrape in its providers' state.
func (r *Relay) applyScrape(t *scrapeTarget, res scrapeResult, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := 0
	if res.unattributed > 0 {
		r.m.unattributed.Add(float64(res.unattributed))
	}
	for _, pi := range t.providers {
		ps := r.providers[pi]
		ps.lastScrape = now
		result, msg := ScrapeOK, "all five series read"
		b := res.batches[ps.cfg.Name]
		switch {
		case res.err != nil:
			result, msg = res.result, res.err.Error()
		case b == nil:
			result, msg = ScrapeNoSeries, fmt.Sprintf("GET %s: none of the five llm_d_epp_* pool series is labelled name=%q", t.endpoint, ps.cfg.Name)
		case !b.qualified():
			result, msg = ScrapeIncomplete, fmt.Sprintf("missing %v: the batch is not qualified, no grid_provider_config_generation row", b.missing())
		}
		if res.unattributed > 0 && (result == ScrapeNoSeries || result == ScrapeIncomplete) {
			msg += fmt.Sprintf(" (%d series without a name/inference_pool label not read: the endpoint serves %d providers)", res.unattributed, len(t.providers))
		}
		r.m.scrapes.WithLabelValues(ps.cfg.Name, result).Inc()
		if b != nil {
			ps.last = b
			if b.qualified() {
				ps.generation = generation(r.cfg.Site, r.cfg.Cluster, ps.cfg, b.info)
			}
		}
		status := "True"
		if result != ScrapeOK && result != ScrapeIncomplete {
			status = "False"
			failed++
		}
		ps.cond = ps.cond.update(now, status, conditionReason(result), msg)
		avail := 0.0
		if status == "True" {
			avail = 1
		}
		r.m.available.WithLabelValues(ps.cfg.Name).Set(avail)
	}
	switch {
	case failed > 0 && !t.failing:
		t.failing = true
		r.log.Error(res.err, "scraping the EPP metrics started failing; keeping the last readiness", "endpoint", t.endpoint, "staleMetricsSeconds", r.providers[t.providers[0]].cfg.MetricsConfig.StaleMetricsSeconds)
	case failed == 0 && t.failing:
		t.failing = false
		r.log.Info("scraping the EPP metrics recovered", "endpoint", t.endpoint)
	}
}

// ownRows returns this site's rows at now: per provider its
// publishes_load row (stamped now), and, for a provider with metrics,
// the series of its last batch while it is no older than
// staleMetricsSeconds (G-08; stamped when read) and the generation row
// of a qualified batch (G-06). Past that window the last readiness is no
// longer kept: the batch is dropped and one llm_d_epp_ready_endpoints 0
// row, stamped at the window end (so it is one sample however often it is
// served), says so, until it is MaxAge old. A provider no scrape has
// read since the relay started gets the same row once staleMetricsSeconds
// has passed since the start, stamped then: the EPP may still hold the
// readiness of the relay's previous run. Called with r.mu held.
func (r *Relay) ownRows(now time.Time, out []signals.Sample) []signals.Sample {
	for _, ps := range r.providers {
		row := func(name string, v float64, stamp time.Time) signals.Sample {
			return signals.Sample{Name: name, Site: r.cfg.Site, Cluster: r.cfg.Cluster, Provider: ps.cfg.Name, Value: v, Stamp: stamp}
		}
		mc := ps.cfg.MetricsConfig
		if mc == nil {
			out = append(out, row(signals.NamePublishesLoad, 0, now))
			continue
		}
		// A provider with metricsConfig publishes load even while its
		// scrape fails (G-50): it goes silent instead.
		out = append(out, row(signals.NamePublishesLoad, 1, now))
		b := ps.last
		stale := time.Duration(mc.StaleMetricsSeconds) * time.Second
		if b == nil {
			// No scrape has read anything since the relay started: the
			// EPP may still hold the readiness a previous run of the relay
			// sent, which must not stand either (G-08). The window runs
			// from the start.
			if end := ps.started.Add(stale); now.Sub(ps.started) > stale && now.Sub(end) < signals.MaxAge {
				out = append(out, row(signals.NameReadyEndpoints, 0, end))
			}
			continue
		}
		if now.Sub(b.readAt) > stale {
			// G-08: the window is over; the EPP must not keep the last
			// readiness (the rows it holds would stand until MaxAge).
			if end := b.readAt.Add(stale); now.Sub(end) < signals.MaxAge {
				out = append(out, row(signals.NameReadyEndpoints, 0, end))
			}
			continue
		}
		for i, name := range signals.PoolSeries {
			if b.present[i] {
				out = append(out, row(name, b.values[i], b.readAt))
			}
		}
		if b.qualified() {
			out = append(out, row(signals.NameConfigGeneration, float64(ps.generation), b.readAt))
		}
	}
	return out
}

// assemble returns the rows served at now: this site's only for a peer,
// every site's for the local EPP (G-03).
func (r *Relay) assemble(now time.Time, all bool) []signals.Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 8 * len(r.providers)
	if all {
		for _, p := range r.peers {
			n += len(p.samples) + len(p.known) + 2
		}
	}
	out := r.ownRows(now, make([]signals.Sample, 0, n))
	if all {
		for _, p := range r.peers {
			out = p.rows(now, out)
		}
	}
	return out
}

func (r *Relay) isLocal(site string) bool { return site == r.cfg.Site }

// serveSignals answers GET /v1/site/signals: the client's verified
// identity decides what it gets (the local EPP every site's rows, a peer
// this site's rows); any other identity gets 403.
func (r *Relay) serveSignals(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != signals.Path {
		http.NotFound(w, req)
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var certs []*x509.Certificate
	if req.TLS != nil {
		certs = req.TLS.PeerCertificates
	}
	idx, err := r.verifier.Verify(certs)
	if err != nil {
		r.m.requests.WithLabelValues(ClientRefused).Inc()
		r.log.V(1).Info("refused a signals client", "remote", req.RemoteAddr, "error", err.Error())
		writeJSONError(w, http.StatusForbidden, "forbidden", err.Error())
		return
	}
	client := ClientPeer
	if idx == 0 {
		client = ClientLocalEPP
	}
	r.m.requests.WithLabelValues(client).Inc()
	// One clock reading for the Date and X-Grid-Now-Ms headers and the
	// rows stamped now.
	now := r.clock.Now()
	samples := r.assemble(now, idx == 0)
	buf := getBuffer()
	defer putBuffer(buf)
	tr, err := signals.Encode(buf, samples, r.isLocal, signals.Limits{MaxBytes: signals.RelayMaxBytes})
	if err != nil {
		// Every row was validated when it entered: a bug.
		r.log.Error(err, "encoding signals")
		writeJSONError(w, http.StatusInternalServerError, "internal", "encoding signals: "+err.Error())
		return
	}
	if idx == 0 {
		for store, n := range tr.Targets {
			r.m.truncated.WithLabelValues(store, signals.CutTarget).Add(float64(n))
		}
		for store, n := range tr.Lines {
			r.m.truncated.WithLabelValues(store, signals.CutLines).Add(float64(n))
		}
		if !tr.Empty() {
			r.log.V(1).Info("signals body truncated", "targets", tr.Targets, "lines", tr.Lines)
		}
	}
	r.m.responseBytes.WithLabelValues(client).Set(float64(buf.Len()))
	h := w.Header()
	h.Set("Content-Type", signals.ContentType)
	signals.SetClock(h, now)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if req.Method == http.MethodGet {
		_, _ = w.Write(buf.Bytes())
	}
}

// hostOf returns the host of a peer's address, for the default SNI.
func hostOf(p Peer) string {
	u, err := url.Parse(p.URL())
	if err != nil {
		return ""
	}
	return u.Hostname()
}
