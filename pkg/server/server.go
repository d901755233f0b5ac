package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/endpointsfile"
	"github.com/switchyard-ai/switchyard/pkg/datastore/scrape"
	"github.com/switchyard-ai/switchyard/pkg/decisions"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/internal/filewatch"
	"github.com/switchyard-ai/switchyard/pkg/metrics"
	"github.com/switchyard-ai/switchyard/pkg/objectives"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/metricssource"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/server/health"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tokenauth"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// Config is what the flags of `epp serve` set. Zero durations and sizes
// take GIE's defaults (see Defaults).
type Config struct {
	// GRPCAddr is the ext_proc listen address (--grpc-port 9002).
	GRPCAddr string
	// HealthAddr is the gRPC health listen address (--grpc-health-port 9003).
	HealthAddr string
	// MetricsAddr is the Prometheus (and pprof) listen address
	// (--metrics-port 9090); "" disables it.
	MetricsAddr string
	// SecureServing serves ext_proc over TLS (--secure-serving).
	SecureServing bool
	// CertPath is a directory with tls.crt and tls.key (--cert-path); empty
	// means a self-signed certificate generated at start.
	CertPath string
	// EnableCertReload reloads CertPath's files when they change.
	EnableCertReload bool
	// HealthChecking also serves gRPC health on the ext_proc port.
	HealthChecking bool
	// EnablePprof serves /debug/pprof/ on the metrics port (off by
	// default; GIE's is on). It needs MetricsFilter or MetricsTokenFile:
	// profiles and the command line are not for everyone.
	EnablePprof bool
	// DecisionBufferSize is how many recent decisions /debug/decisions
	// keeps (--decision-buffer-size); 0 records none. At most
	// decisions.MaxSize. Without an authenticated metrics port
	// (MetricsFilter or MetricsTokenFile) nothing is recorded either:
	// /debug/decisions could not be read.
	DecisionBufferSize int
	// DecisionEndpoints bounds the endpoints a decision lists per filter
	// and per profile run (--decision-max-endpoints); 0 means
	// scheduling.DefaultExplainEndpoints.
	DecisionEndpoints int
	// EmitEndpointScores puts the primary profile's per-endpoint scores
	// into the headers response's dynamic metadata
	// (--emit-endpoint-scores, extproc.EndpointScoresKey).
	EmitEndpointScores bool
	// ConfigFile is watched and hot-reloaded; ConfigText is static; with
	// neither the embedded default configuration is used.
	ConfigFile string
	ConfigText string
	// EndpointsFile is the standalone endpoint source (watched).
	EndpointsFile string
	// Source builds the endpoint source of Kubernetes mode (the
	// InferencePool or --endpoint-selector watch) once the datastore
	// exists. Exactly one of EndpointsFile and Source is set.
	Source func(store *datastore.Store) (EndpointSource, error)
	// PoolName and PoolNamespace name the pool in metrics.
	PoolName      string
	PoolNamespace string
	// RefreshMetricsInterval is the scrape period (50ms).
	RefreshMetricsInterval time.Duration
	// RefreshPrometheusMetricsInterval is the pool-gauge period (5s).
	RefreshPrometheusMetricsInterval time.Duration
	// MetricsStalenessThreshold makes an endpoint stale (2s).
	MetricsStalenessThreshold time.Duration
	// ScrapeTimeout bounds one scrape (1s).
	ScrapeTimeout time.Duration
	// DisableSubsetFilter ignores the subset hint.
	DisableSubsetFilter bool
	// MaxRequestBodyBytes bounds request bodies (64 MiB).
	MaxRequestBodyBytes int64
	// MaxBufferedBytes is the process-wide budget of request (and buffered
	// response) body bytes that streams hold while they wait for more
	// (--max-buffered-request-bytes); 0 means extproc's default (256 MiB).
	MaxBufferedBytes int64
	// RequestBodyTimeout bounds the time from a stream's start until its
	// request body is complete (--request-body-timeout); 0 means extproc's
	// default (60 s).
	RequestBodyTimeout time.Duration
	// ConformanceTestHeaders honours test-epp-endpoint-selection on every
	// request and echoes x-conformance-test-served-endpoint to the client
	// (--enable-conformance-test-headers): for GIE's conformance suite and
	// tests only, never in production.
	ConformanceTestHeaders bool
	// GRPCMaxRecvMsgSize bounds one ext_proc message
	// (--grpc-max-message-bytes); 0 means DefaultGRPCMaxRecvMsgSize. With
	// MaxStreams it bounds what streams can make the EPP hold before their
	// messages are complete: MaxStreams × GRPCMaxRecvMsgSize.
	GRPCMaxRecvMsgSize int
	// MaxStreams bounds the ext_proc streams open at once over all
	// connections (--grpc-max-streams); beyond it a new stream fails with
	// RESOURCE_EXHAUSTED. 0 means DefaultMaxStreams.
	MaxStreams int64
	// ShutdownGrace bounds the drain of open streams at shutdown (30s).
	ShutdownGrace time.Duration
	// MetricsSourceOverride, when set, replaces the metrics-data-source
	// settings (the deprecated --model-server-metrics-* flags).
	MetricsSourceOverride func(*metricssource.Params)
	// Seed makes plugin randomness reproducible (0: random).
	Seed uint64
	// Logger is the root logger.
	Logger logr.Logger
	// Registry receives every metric; nil means a new one with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// LeaderElection tells the health service that replicas elect a
	// leader: unknown service names then answer SERVICE_UNKNOWN, as GIE's.
	LeaderElection bool
	// MetricsFilter, when set, wraps every handler of the metrics port
	// (/metrics, /debug/endpoints, /debug/pprof/): Kubernetes mode's
	// --metrics-endpoint-auth puts TokenReview authentication and
	// SubjectAccessReview authorization there, as GIE does.
	MetricsFilter func(http.Handler) http.Handler
	// MetricsTokenFile, when set, guards every path of the metrics port
	// with the bearer token the file holds (--metrics-token-file; watched,
	// so a rotated token takes over). Exclusive with MetricsFilter. The
	// debug endpoints (/debug/endpoints, /debug/pprof/) are served only
	// when one of the two is set; otherwise they answer 404.
	MetricsTokenFile string
	// AdminTokenFile, when set, turns the admin API on (/admin/ on the
	// metrics port, see admin.go) guarded by the bearer token the file
	// holds (--admin-token-file; watched). Without it the admin API is on
	// only behind MetricsFilter (Kubernetes mode); otherwise it answers
	// 404.
	AdminTokenFile string
	// GRPCMaxConcurrentStreams bounds the ext_proc streams of one
	// connection (--grpc-max-concurrent-streams); 0 means
	// DefaultGRPCMaxConcurrentStreams.
	GRPCMaxConcurrentStreams uint32
	// GRPCMaxConnectionIdle closes (GOAWAY) an ext_proc connection without
	// streams for this long; GRPCMaxConnectionAge closes any connection
	// this old, after GRPCMaxConnectionAgeGrace for its open streams. 0
	// means never (Defaults sets the idle time to 15 minutes).
	GRPCMaxConnectionIdle     time.Duration
	GRPCMaxConnectionAge      time.Duration
	GRPCMaxConnectionAgeGrace time.Duration
	// Gatherers are more metric sources served on /metrics beside
	// Registry (controller-runtime's registry in Kubernetes mode: work
	// queue, API client and leader-election metrics).
	Gatherers []prometheus.Gatherer
	// SelectionStrategy is the selection strategy chosen outside the
	// configuration (--selection-strategy, else
	// SWITCHYARD_SELECTION_STRATEGY); empty: the configuration's. It is
	// config.Options.SelectionStrategy of every load, reloads included.
	SelectionStrategy string
	// Multisite, when set, turns on the multi-site signals source (the
	// site topology, the site store and the poller of the local
	// site-relay); nil leaves it off.
	Multisite *MultisiteConfig
	// ObjectivesFile is the watched file of InferenceObjective priorities
	// (--objectives-file, see pkg/objectives); Objectives, in Kubernetes
	// mode, builds the InferenceObjective watch that fills set. At most
	// one is set; with neither every request has priority 0. The watch's
	// Run error stops the server, like the endpoint source's.
	ObjectivesFile string
	Objectives     func(set *objectives.Set) (Runner, error)
	// Tracing is the OpenTelemetry setup (--tracing and the OTEL_*
	// variables, tracing.FromEnv); the zero value traces nothing. The
	// server owns the provider: New builds it, Run flushes and stops it
	// after the last stream ended (within TracingShutdownTimeout).
	Tracing tracing.Config
}

// TracingShutdownTimeout bounds the flush of queued spans at shutdown (an
// unreachable collector must not hold the exit).
const TracingShutdownTimeout = 5 * time.Second

// Defaults of the ext_proc listener's bounds.
const (
	// DefaultGRPCMaxConcurrentStreams is --grpc-max-concurrent-streams.
	DefaultGRPCMaxConcurrentStreams = 1000
	// DefaultMaxStreams is --grpc-max-streams.
	DefaultMaxStreams = 10000
	// DefaultGRPCMaxRecvMsgSize is --grpc-max-message-bytes: Envoy hands
	// body chunks to ext_proc as they arrive, within its 1 MiB buffer
	// limit; the rest is headroom for the message's framing.
	DefaultGRPCMaxRecvMsgSize = 2 << 20
	// DefaultGRPCMaxConnectionIdle is --grpc-max-connection-idle.
	DefaultGRPCMaxConnectionIdle = 15 * time.Minute
)

// Defaults returns GIE's defaults, and Switchyard's for what GIE does not
// have (or where Switchyard's default is safer: pprof is off).
func Defaults() Config {
	return Config{
		GRPCAddr:                         ":9002",
		HealthAddr:                       ":9003",
		MetricsAddr:                      ":9090",
		SecureServing:                    true,
		GRPCMaxConcurrentStreams:         DefaultGRPCMaxConcurrentStreams,
		MaxStreams:                       DefaultMaxStreams,
		GRPCMaxRecvMsgSize:               DefaultGRPCMaxRecvMsgSize,
		MaxBufferedBytes:                 extproc.DefaultMaxBufferedBytes,
		RequestBodyTimeout:               extproc.DefaultRequestBodyTimeout,
		GRPCMaxConnectionIdle:            DefaultGRPCMaxConnectionIdle,
		PoolName:                         "switchyard",
		RefreshMetricsInterval:           50 * time.Millisecond,
		RefreshPrometheusMetricsInterval: 5 * time.Second,
		MetricsStalenessThreshold:        2 * time.Second,
		ScrapeTimeout:                    time.Second,
		MaxRequestBodyBytes:              extproc.DefaultMaxRequestBodyBytes,
		ShutdownGrace:                    30 * time.Second,
		DecisionBufferSize:               decisions.DefaultSize,
	}
}

// maxDecisionEndpoints bounds --decision-max-endpoints: what one decision
// may list per step, so its record stays small.
const maxDecisionEndpoints = 1024

// EndpointSource keeps the datastore's endpoint set: it replaces the
// endpoints as its source changes and marks the store synced once it has
// read the whole pool (Store.SetSynced), which readiness waits for.
type EndpointSource interface {
	// Run feeds the store until ctx ends. An error means the source cannot
	// go on (its controller manager failed) and stops the server.
	Run(ctx context.Context) error
	// Ready reports whether this replica may take traffic, apart from the
	// sync: false while another replica leads.
	Ready() bool
	// Describe returns key/value pairs for the start-up log line.
	Describe() []any
}

// fileSource is the standalone endpoints file as an EndpointSource.
type fileSource struct {
	*endpointsfile.Source
	path string
}

func (f fileSource) Run(ctx context.Context) error { f.Source.Run(ctx); return nil }
func (fileSource) Ready() bool                     { return true }
func (f fileSource) Describe() []any               { return []any{"endpointsFile", f.path} }

// generation is one loaded configuration.
type generation struct {
	loaded  *config.Loaded
	runtime *extproc.Runtime
	scrape  scrape.Config
	flow    *flowGate // the server's flow controller; nil without the flowControl gate
	flowCfg *flowcontrol.Config
}

// Server is a running endpoint picker.
type Server struct {
	cfg Config
	log logr.Logger
	// decisions keeps the recent decisions (nil: off).
	decisions *decisions.Ring
	reg       *prometheus.Registry
	metrics   *metrics.Metrics
	store     *datastore.Store
	scraper   *scrape.Scraper
	source    EndpointSource
	ext       *extproc.Server
	runners   *runners // the serving configuration's background plugins
	gen       atomic.Pointer[generation]
	reloadMu  sync.Mutex // serializes reloads

	grpcLis, healthLis, metricsLis net.Listener
	grpcSrv, healthSrv             *grpc.Server
	metricsSrv                     *http.Server
	checker                        *health.Checker
	certs                          *tlsutil.Reloader
	tokens                         *tokenauth.Guard   // --metrics-token-file
	adminTokens                    *tokenauth.Guard   // --admin-token-file
	extHealth                      *grpchealth.Server // --health-checking on the ext_proc port
	draining                       atomic.Bool
	streams                        atomic.Int64 // open ext_proc streams
	streamsRejected                prometheus.Counter
	cfgRead                        atomic.Pointer[[32]byte] // filewatch.Sum of the configuration file last read; nil if it could not be read
	multisite                      *multisite               // nil when Config.Multisite is nil
	objectives                     *objectiveSource
	flows                          flowRunner
	flow                           atomic.Pointer[flowGate] // created by the first configuration with flow control
	tracing                        *tracing.Provider        // nil when tracing is off
}

// New loads the configuration and the endpoints and binds the listeners,
// so that errors surface before anything serves. Run serves.
func New(cfg Config) (*Server, error) {
	d := Defaults()
	if cfg.RefreshMetricsInterval <= 0 {
		cfg.RefreshMetricsInterval = d.RefreshMetricsInterval
	}
	if cfg.RefreshPrometheusMetricsInterval <= 0 {
		cfg.RefreshPrometheusMetricsInterval = d.RefreshPrometheusMetricsInterval
	}
	if cfg.MetricsStalenessThreshold <= 0 {
		cfg.MetricsStalenessThreshold = d.MetricsStalenessThreshold
	}
	if cfg.ScrapeTimeout <= 0 {
		cfg.ScrapeTimeout = d.ScrapeTimeout
	}
	if cfg.MaxRequestBodyBytes <= 0 {
		cfg.MaxRequestBodyBytes = d.MaxRequestBodyBytes
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = d.ShutdownGrace
	}
	if cfg.PoolName == "" {
		cfg.PoolName = d.PoolName
	}
	if cfg.DecisionBufferSize < 0 || cfg.DecisionBufferSize > decisions.MaxSize {
		return nil, fmt.Errorf("--decision-buffer-size: must be in [0, %d], got %d", decisions.MaxSize, cfg.DecisionBufferSize)
	}
	if cfg.DecisionEndpoints < 0 || cfg.DecisionEndpoints > maxDecisionEndpoints {
		return nil, fmt.Errorf("--decision-max-endpoints: must be in [0, %d], got %d", maxDecisionEndpoints, cfg.DecisionEndpoints)
	}
	if cfg.ConfigFile != "" && cfg.ConfigText != "" {
		return nil, errors.New("--config-file and --config-text are mutually exclusive")
	}
	switch {
	case cfg.EndpointsFile == "" && cfg.Source == nil:
		return nil, errors.New("no endpoint source: give --endpoints-file (standalone mode) or --pool-name / --endpoint-selector (Kubernetes mode)")
	case cfg.EndpointsFile != "" && cfg.Source != nil:
		return nil, errors.New("two endpoint sources: --endpoints-file and Kubernetes mode are mutually exclusive")
	}
	s := &Server{cfg: cfg, log: cfg.Logger, reg: cfg.Registry}
	if s.log.GetSink() == nil {
		s.log = logr.Discard()
	}
	s.decisions = s.newDecisionRing()
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	var err error
	if s.metrics, err = metrics.New(s.reg, cfg.PoolName); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	s.metrics.SetInfo(buildInfo())
	if err := s.registerStreamMetrics(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}

	gen, err := s.load(nil)
	if err != nil {
		return nil, err
	}
	s.gen.Store(gen)
	s.commitFlow(gen)
	built := false
	defer func() {
		if !built { // the configuration will never serve
			gen.loaded.Close()
		}
	}()

	s.store = datastore.New(datastore.Options{StalenessThreshold: cfg.MetricsStalenessThreshold, Logger: s.log.WithName("datastore")})
	s.store.OnRemoved(s.forget)
	s.runners = newRunners(storeEnv{s.store})
	if err := s.reg.Register(newFlowCollector(cfg.PoolName, s.flow.Load)); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := s.reg.Register(newEligibilityCollector(s.store)); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if cfg.EndpointsFile != "" {
		src := endpointsfile.NewSource(cfg.EndpointsFile, s.store, s.log.WithName("endpoints-file"), s.reg)
		if err := src.Load(); err != nil {
			return nil, fmt.Errorf("endpoints file: %w", err)
		}
		s.source = fileSource{Source: src, path: cfg.EndpointsFile}
	} else if s.source, err = cfg.Source(s.store); err != nil {
		return nil, fmt.Errorf("endpoint source: %w", err)
	}
	if cfg.Multisite != nil {
		if s.multisite, err = s.newMultisite(*cfg.Multisite); err != nil {
			return nil, fmt.Errorf("multi-site signals: %w", err)
		}
	}
	if err := s.newObjectives(); err != nil {
		return nil, err
	}
	s.scraper, err = scrape.NewScraper(s.store, gen.scrape, scrape.Options{
		Interval:   cfg.RefreshMetricsInterval,
		Timeout:    cfg.ScrapeTimeout,
		Logger:     s.log.WithName("scraper"),
		Registerer: s.reg,
	})
	if err != nil {
		return nil, fmt.Errorf("scraper: %w", err)
	}
	fallbacks, err := extproc.NewFallbackMetrics(s.reg)
	if err != nil {
		return nil, err
	}
	if cfg.Tracing.Enabled && cfg.Tracing.ServiceVersion == "" {
		_, cfg.Tracing.ServiceVersion = buildInfo()
	}
	if s.tracing, err = tracing.New(context.Background(), cfg.Tracing, s.log); err != nil {
		return nil, err
	}
	defer func() {
		if !built {
			s.stopTracing()
		}
	}()
	s.ext, err = extproc.New(extproc.Options{
		Tracer:                 s.tracing.Tracer(),
		FallbackMetrics:        fallbacks,
		Runtime:                func() *extproc.Runtime { return s.gen.Load().runtime },
		Endpoints:              func() extproc.EndpointView { return s.store.Snapshot() },
		Stats:                  endpointStats,
		Objective:              s.objectives.set.Lookup,
		Metrics:                s.metrics,
		Logger:                 s.log.WithName("extproc"),
		MaxRequestBodyBytes:    cfg.MaxRequestBodyBytes,
		MaxBufferedBytes:       cfg.MaxBufferedBytes,
		RequestBodyTimeout:     cfg.RequestBodyTimeout,
		ConformanceTestHeaders: cfg.ConformanceTestHeaders,
		DisableSubsetFilter:    cfg.DisableSubsetFilter,
		Sites:                  s.siteStage(),
		Decisions: extproc.DecisionOptions{Ring: s.decisions, EmitEndpointScores: cfg.EmitEndpointScores,
			MaxEndpoints: cfg.DecisionEndpoints},
	})
	if err != nil {
		return nil, err
	}
	if err := s.listen(); err != nil {
		s.closeListeners()
		return nil, err
	}
	built = true
	return s, nil
}

// newDecisionRing returns the ring of --decision-buffer-size, or nil when
// /debug/decisions could never be read: it is served only on an
// authenticated metrics port (Config.MetricsFilter or
// Config.MetricsTokenFile), and every /debug/ path answers 404 otherwise.
// Recording nobody can read would cost every request for nothing, so it is
// off then, said once here. --emit-endpoint-scores does not need the ring.
func (s *Server) newDecisionRing() *decisions.Ring {
	size := s.cfg.DecisionBufferSize
	if size <= 0 {
		return nil
	}
	if s.cfg.MetricsAddr == "" || (s.cfg.MetricsFilter == nil && s.cfg.MetricsTokenFile == "") {
		s.log.Info("Decision recording is off: /debug/decisions is served only on an authenticated metrics port (--metrics-token-file, or --metrics-endpoint-auth in Kubernetes mode)",
			"decisionBufferSize", size, "metricsAddr", s.cfg.MetricsAddr)
		return nil
	}
	return decisions.New(size)
}

// endpointStats returns the datastore's accounting of an endpoint.
func endpointStats(e *scheduling.Endpoint) extproc.Stats {
	if st, ok := datastore.StatsKey.Get(e); ok && st != nil {
		return st
	}
	return nil
}

// load builds a configuration from the configured source. prev is the
// generation a reload replaces.
func (s *Server) load(prev *generation) (*generation, error) {
	opts := config.Options{
		Registry:   plugins.InTree(),
		Context:    context.Background(),
		Logger:     s.log.WithName("plugins"),
		Registerer: s.reg,
		Seed:       s.cfg.Seed,

		SelectionStrategy: s.cfg.SelectionStrategy,
		ScrapeInterval:    s.cfg.RefreshMetricsInterval,
	}
	if prev != nil {
		opts.Previous = prev.loaded
	}
	var (
		loaded *config.Loaded
		err    error
		what   = "embedded default configuration"
	)
	switch {
	case s.cfg.ConfigFile != "":
		what = s.cfg.ConfigFile
		var data []byte
		// The watcher compares the file with what was read here, so an
		// edit made before it starts, or a file caught half-written, is
		// not missed.
		if data, err = config.ReadFile(s.cfg.ConfigFile, 0); err == nil {
			sum := filewatch.Sum(data)
			s.cfgRead.Store(&sum)
			loaded, err = config.Load(data, opts)
		} else {
			s.cfgRead.Store(nil)
		}
	case s.cfg.ConfigText != "":
		what = "--config-text"
		loaded, err = config.Load([]byte(s.cfg.ConfigText), opts)
	default:
		loaded, err = config.Load(configfiles.Default, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for _, w := range slices.Concat(loaded.Warnings, plugins.ConfigWarnings(loaded)) {
		s.log.Info("Configuration warning", "config", what, "warning", w)
	}
	gen := &generation{loaded: loaded, runtime: &extproc.Runtime{Scheduler: loaded.Scheduler, Format: "openai",
		FallbackChains:                 loaded.Config.FallbackChains,
		AnthropicCacheControlInjection: loaded.Config.PrefixRouting != nil && loaded.Config.PrefixRouting.AnthropicCacheControlInjection}}
	if loaded.Parser != nil {
		gen.runtime.Format = loaded.Parser.Format()
	}
	if err := s.prepareFlow(gen); err != nil {
		loaded.Release(opts.Previous)
		return nil, fmt.Errorf("%s: flowControl: %w", what, err)
	}
	gen.scrape = scrapeConfig(loaded)
	if s.cfg.MetricsSourceOverride != nil && gen.scrape.Extractor != nil {
		s.cfg.MetricsSourceOverride(&gen.scrape.Source)
	}
	return gen, nil
}

// scrapeConfig picks the metrics source and extractor of the data layer;
// none means no scraping (the data layer is disabled).
func scrapeConfig(l *config.Loaded) scrape.Config {
	out := scrape.Config{Source: metricssource.DefaultParams()}
	for _, b := range l.DataSources {
		src, ok := b.Source.(*metricssource.Source)
		if !ok {
			continue
		}
		for _, x := range b.Extractors {
			if cm, ok := x.(*coremetrics.Extractor); ok {
				out.Source = src.Settings()
				out.Extractor = cm
				return out
			}
		}
	}
	return out
}

// forget drops what plugins keep about endpoints that left the pool.
func (s *Server) forget(keys []string) {
	gone := make(map[string]bool, len(keys))
	for _, k := range keys {
		gone[k] = true
	}
	for _, p := range s.gen.Load().loaded.Plugins {
		if pr, ok := p.(interface {
			Prune(keep func(key string) bool) int
		}); ok {
			pr.Prune(func(k string) bool { return !gone[k] })
		}
		if f, ok := p.(interface{ Forget(key string) }); ok {
			for _, k := range keys {
				f.Forget(k)
			}
		}
	}
	s.log.V(1).Info("Endpoints left the pool", "endpoints", keys)
}

// Reload loads the configuration file again. A valid configuration takes
// over from the next request; an invalid one is refused and the current
// one stays. Once the new configuration serves, the plugin instances of
// the old one it did not keep are closed and their series deleted;
// streams already running on the old configuration finish on it.
func (s *Server) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	prev := s.gen.Load()
	gen, err := s.load(prev)
	if err != nil {
		s.metrics.ConfigReload(false)
		s.log.Error(err, "Configuration reload refused; the last good configuration stays")
		return err
	}
	if err := s.scraper.SetConfig(gen.scrape); err != nil {
		gen.loaded.Release(prev.loaded) // prev keeps serving
		s.metrics.ConfigReload(false)
		s.log.Error(err, "Configuration reload refused: the scraper cannot use its data layer settings; the last good configuration stays")
		return err
	}
	// Plugins that judge the whole pool get it before the first request.
	s.runners.prepare(gen.loaded)
	// Flow control's new settings apply to the requests waiting too.
	s.commitFlow(gen)
	s.gen.Store(gen)
	// The new configuration serves: its new background plugins start,
	// those of instances it dropped stop (Release then closes them).
	s.runners.sync(gen.loaded)
	prev.loaded.Release(gen.loaded)
	s.metrics.ConfigReload(true)
	s.log.Info("Configuration reloaded", "keptPlugins", gen.loaded.Kept)
	return nil
}

// firstWins merges gatherers. The Go runtime and process families, which
// controller-runtime's registry and the server's both carry, are served
// once (the first gatherer's); any other name given twice is a gathering
// error, as prometheus.Gatherers reports it.
type firstWins []prometheus.Gatherer

// Gather implements prometheus.Gatherer.
func (g firstWins) Gather() ([]*dto.MetricFamily, error) {
	var (
		out  []*dto.MetricFamily
		errs prometheus.MultiError
		seen = map[string]bool{}
	)
	for _, x := range g {
		fams, err := x.Gather()
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range fams {
			name := f.GetName()
			switch {
			case !seen[name]:
				seen[name] = true
				out = append(out, f)
			case !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_"):
				errs = append(errs, fmt.Errorf("metric family %s is served by two registries; the second is dropped", name))
			}
		}
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, errs.MaybeUnwrap()
}

func (s *Server) closeListeners() {
	for _, l := range []net.Listener{s.grpcLis, s.healthLis, s.metricsLis} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// ready is the readiness of the health service: the endpoint source has
// loaded the pool and lets this replica serve (it leads, with leader
// election), and the server is not draining.
func (s *Server) ready() bool {
	return !s.draining.Load() && s.store.Snapshot().Synced && s.source.Ready()
}

// GRPCAddr is the ext_proc listener's address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HealthAddr is the health listener's address.
func (s *Server) HealthAddr() string { return s.healthLis.Addr().String() }

// MetricsAddr is the metrics listener's address ("" when disabled).
func (s *Server) MetricsAddr() string {
	if s.metricsLis == nil {
		return ""
	}
	return s.metricsLis.Addr().String()
}

// Store is the endpoint datastore (read-only use: snapshots, stats).
func (s *Server) Store() *datastore.Store { return s.store }

// Registry is the Prometheus registry of every metric.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Run serves until ctx ends, then drains: readiness turns NOT_SERVING,
// open ext_proc streams get up to ShutdownGrace to finish, and every
// background loop stops before Run returns.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	goLoop := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	goErr := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.source.Run(ctx); err != nil {
			errc <- fmt.Errorf("endpoint source: %w", err)
		}
	}()
	goLoop(s.scraper.Run)
	goLoop(s.poolMetricsLoop)
	goLoop(s.endpointWarningsLoop)
	s.reloadMu.Lock()
	s.runners.start(ctx, s.gen.Load().loaded)
	s.flows.run(ctx, s.flow.Load())
	s.reloadMu.Unlock()
	if s.cfg.ConfigFile != "" {
		goLoop(s.watchConfig)
	}
	if s.certs != nil && s.cfg.EnableCertReload {
		goLoop(s.certs.Run)
	}
	if s.tokens != nil {
		goLoop(s.tokens.Run)
	}
	if s.adminTokens != nil {
		goLoop(s.adminTokens.Run)
	}
	if s.multisite != nil {
		s.multisite.start(goLoop, goErr)
	}
	if s.objectives.run != nil {
		goErr("objectives", s.objectives.run)
	}
	serve := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", name, err)
			}
		}()
	}
	serve("ext_proc", func() error { return s.grpcSrv.Serve(s.grpcLis) })
	serve("health", func() error { return s.healthSrv.Serve(s.healthLis) })
	if s.metricsSrv != nil {
		serve("metrics", func() error { return s.metricsSrv.Serve(s.metricsLis) })
	}
	kv := []any{"extProc", s.GRPCAddr(), "secure", s.cfg.SecureServing, "health", s.HealthAddr(),
		"metrics", s.MetricsAddr(), "configFile", s.cfg.ConfigFile}
	kv = append(kv, s.source.Describe()...)
	if s.multisite != nil {
		kv = append(kv, s.multisite.describe()...)
	}
	s.log.Info("Switchyard serving", kv...)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		s.log.Error(runErr, "A server failed; shutting down")
	}
	s.shutdown()
	cancel()
	wg.Wait()
	s.flows.wait()
	s.runners.wait()
	s.closeConfig()
	s.stopTracing()
	return runErr
}

// closeConfig closes the plugin instances of the serving configuration,
// once nothing serves it any more.
func (s *Server) closeConfig() {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.gen.Load().loaded.Close()
}

// shutdown drains open streams, then stops the servers.
func (s *Server) shutdown() {
	s.draining.Store(true)
	if s.extHealth != nil {
		s.extHealth.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", healthpb.HealthCheckResponse_NOT_SERVING)
	}
	s.log.Info("Shutting down: draining open streams", "grace", s.cfg.ShutdownGrace)
	done := make(chan struct{})
	go func() { s.grpcSrv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownGrace):
		s.log.Info("Drain timed out; closing the remaining streams")
		s.grpcSrv.Stop()
		<-done
	}
	s.healthSrv.Stop()
	if s.metricsSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.metricsSrv.Shutdown(sctx)
		cancel()
	}
}

// poolMetricsLoop refreshes the pool gauges.
func (s *Server) poolMetricsLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.RefreshPrometheusMetricsInterval)
	defer t.Stop()
	for {
		s.updatePoolMetrics()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) updatePoolMetrics() {
	snap := s.store.Snapshot()
	all := snap.All()
	samples := make([]metrics.PoolSample, 0, len(all))
	for _, e := range all {
		m := e.Metrics()
		samples = append(samples, metrics.PoolSample{
			Name:    e.Name(),
			Ready:   !snap.Stale(e),
			Queue:   m.WaitingQueueSize,
			Running: m.RunningRequestsSize,
			KVUsage: m.KVCacheUsagePercent,
		})
	}
	s.metrics.UpdatePool(samples)
}

// watchConfig reloads the configuration file when it changes. It watches
// the directory, so editors' atomic renames and Kubernetes ConfigMap
// symlink swaps are seen.
func (s *Server) watchConfig(ctx context.Context) {
	opts := filewatch.Options{Debounce: 100 * time.Millisecond, Poll: 10 * time.Second, Logger: s.log.WithValues("file", s.cfg.ConfigFile)}
	opts.Initial = s.cfgRead.Load()
	err := filewatch.Run(ctx, []string{s.cfg.ConfigFile}, opts, func() ([32]byte, bool) {
		s.log.V(1).Info("Configuration file changed", "file", filepath.Clean(s.cfg.ConfigFile))
		_ = s.Reload()
		if p := s.cfgRead.Load(); p != nil {
			return *p, true
		}
		return [32]byte{}, false
	})
	if err != nil {
		s.log.Error(err, "Cannot watch the configuration file; hot reload is off")
	}
}

// recoverStream turns a panic in a stream handler (a plugin bug) into an
// Internal error on that stream, logged with its stack, instead of a crash
// of every stream. The stream's deferred completion still runs.
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error(fmt.Errorf("panic: %v", r), "Stream handler panicked", "method", info.FullMethod, "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "internal error")
		}
	}()
	return handler(srv, ss)
}
