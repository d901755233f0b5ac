package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/decisions"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/metricssource"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/server"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// serveFlags are GIE's cmd/epp flags (same names and defaults) plus
// Switchyard's own.
type serveFlags struct {
	grpcPort, healthPort, metricsPort int
	grpcBind, healthBind, metricsBind string
	metricsTokenFile                  string
	adminTokenFile                    string
	grpcMaxStreams                    uint
	grpcMaxConnIdle, grpcMaxConnAge   time.Duration
	grpcMaxConnAgeGrace               time.Duration
	grpcMaxStreamsTotal               int64
	grpcMaxMsg                        int
	maxBuffered                       int64
	requestBodyTimeout                time.Duration
	conformanceHeaders                bool
	metricsAuth, pprof                bool
	decisionBuffer, decisionEndpoints int
	emitScores                        bool
	poolName, poolNamespace, poolGrp  string
	endpointSelector                  string
	endpointTargetPorts               portList
	kube                              kubeFlags
	multisite                         multisiteFlags
	objectives                        objectiveFlags
	endpointsFile                     string
	disableSubset                     bool
	configFile, configText            string
	refreshMetrics, refreshProm       time.Duration
	staleness                         time.Duration
	secure                            bool
	certPath                          string
	certReload                        bool
	healthChecking                    bool
	leaderElection                    bool
	tracing                           bool
	maxBody                           int64
	shutdownGrace                     time.Duration
	seed                              uint64
	selectionStrategy                 string
	log                               logFlags
	// Deprecated GIE flags.
	msMetricsPort                                     int
	msMetricsScheme, msMetricsPath                    string
	msInsecure                                        bool
	queuedMetric, runningMetric, kvMetric, loraMetric string
	cacheInfoMetric                                   string
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	d := server.Defaults()
	fs.IntVar(&f.grpcPort, "grpc-port", 9002, "ext_proc gRPC port")
	fs.IntVar(&f.healthPort, "grpc-health-port", 9003, "gRPC health port (services liveness, readiness, envoy.service.ext_proc.v3.ExternalProcessor)")
	fs.IntVar(&f.metricsPort, "metrics-port", 9090, "Prometheus metrics (and debug) port; 0 disables")
	fs.StringVar(&f.grpcBind, "grpc-bind-address", "", "IP address the ext_proc listener binds (default: every interface)")
	fs.StringVar(&f.healthBind, "grpc-health-bind-address", "", "IP address the gRPC health listener binds (default: every interface)")
	fs.StringVar(&f.metricsBind, "metrics-bind-address", "", "IP address the metrics listener binds (default: every interface); the port is --metrics-port")
	fs.BoolVar(&f.metricsAuth, "metrics-endpoint-auth", true, "Kubernetes mode: the metrics port (/metrics, /debug/*) requires a bearer token allowed by a TokenReview and a SubjectAccessReview (GET on the path); not enforced in standalone mode, which has no API server (see --metrics-token-file)")
	fs.StringVar(&f.metricsTokenFile, "metrics-token-file", "", "file holding a bearer token that every request to the metrics port must carry (Authorization: Bearer ...); watched for rotation (a file that becomes unreadable or invalid keeps the last good token: revoke by writing a new one). Turns on /debug/endpoints. For standalone mode, or Kubernetes mode with --metrics-endpoint-auth=false")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "file holding a bearer token that turns on the admin API (/admin/backends, /admin/stats/backends, /admin/backends/{name}/engine-stats, /admin/prefix-routing/stats on the metrics port) and that its requests must carry (Authorization: Bearer ...); watched for rotation. Without it the admin API is served only in Kubernetes mode behind --metrics-endpoint-auth, and answers 404 otherwise")
	fs.IntVar(&f.decisionBuffer, "decision-buffer-size", d.DecisionBufferSize, "how many recent routing decisions /debug/decisions keeps on the metrics port (each bounded in size; served only with --metrics-token-file or --metrics-endpoint-auth, and nothing is recorded without one); 0 records none")
	fs.IntVar(&f.decisionEndpoints, "decision-max-endpoints", scheduling.DefaultExplainEndpoints, "how many endpoints a recorded decision lists per filter and per profile run (the highest weighted totals, plus the chosen one; the rest are counted as truncated)")
	fs.BoolVar(&f.emitScores, "emit-endpoint-scores", false, "put the weighted total of every scored candidate of the primary profile into the ext_proc response's dynamic metadata (envoy.lb / "+extproc.EndpointScoresKey+", the key llm-d's router uses; not capped by --decision-max-endpoints)")
	fs.BoolVar(&f.pprof, "enable-pprof", d.EnablePprof, "serve /debug/pprof/ on the metrics port (GIE's default is true; Switchyard's is false); needs --metrics-token-file or --metrics-endpoint-auth")
	fs.UintVar(&f.grpcMaxStreams, "grpc-max-concurrent-streams", uint(d.GRPCMaxConcurrentStreams), "most ext_proc streams (HTTP requests) one gRPC connection carries at a time; a proxy opens more connections beyond")
	fs.DurationVar(&f.grpcMaxConnIdle, "grpc-max-connection-idle", d.GRPCMaxConnectionIdle, "close (GOAWAY) an ext_proc connection that carried no stream for this long; 0: never")
	fs.DurationVar(&f.grpcMaxConnAge, "grpc-max-connection-age", 0, "close (GOAWAY) every ext_proc connection this old, so load spreads over new EPP replicas; 0: never")
	fs.DurationVar(&f.grpcMaxConnAgeGrace, "grpc-max-connection-age-grace", 0, "with --grpc-max-connection-age: how long open streams may finish before the connection is closed; 0: as long as they take")
	fs.StringVar(&f.poolName, "pool-name", "", "InferencePool name (Kubernetes mode); with --endpoints-file it only names the pool in metrics")
	fs.StringVar(&f.poolNamespace, "pool-namespace", "", "InferencePool namespace (default $NAMESPACE, then \"default\")")
	fs.StringVar(&f.poolGrp, "pool-group", "inference.networking.k8s.io", "InferencePool API group")
	fs.StringVar(&f.endpointSelector, "endpoint-selector", "", "pod label selector k=v[,k=v] (Kubernetes mode without the CRD)")
	fs.Var(&f.endpointTargetPorts, "endpoint-target-ports", "target ports for --endpoint-selector: comma-separated, or the flag repeated")
	f.kube.register(fs)
	f.multisite.register(fs)
	f.objectives.register(fs)
	fs.StringVar(&f.endpointsFile, "endpoints-file", "", "standalone mode: YAML file listing the endpoints (watched for changes)")
	fs.BoolVar(&f.disableSubset, "disable-endpoint-subset-filter", false, "ignore the gateway's subset hint (envoy.lb.subset_hint)")
	fs.StringVar(&f.configFile, "config-file", "", "EndpointPickerConfig file (watched and hot-reloaded)")
	fs.StringVar(&f.configText, "config-text", "", "EndpointPickerConfig as text (exclusive with --config-file)")
	fs.DurationVar(&f.refreshMetrics, "refresh-metrics-interval", d.RefreshMetricsInterval, "model-server metrics scrape interval")
	fs.DurationVar(&f.refreshProm, "refresh-prometheus-metrics-interval", d.RefreshPrometheusMetricsInterval, "pool gauge refresh interval")
	fs.DurationVar(&f.staleness, "metrics-staleness-threshold", d.MetricsStalenessThreshold, "metrics older than this make an endpoint stale (no new requests)")
	fs.BoolVar(&f.secure, "secure-serving", true, "serve ext_proc over TLS (self-signed certificate unless --cert-path)")
	fs.StringVar(&f.certPath, "cert-path", "", "directory with tls.crt and tls.key for ext_proc TLS")
	fs.BoolVar(&f.certReload, "enable-cert-reload", true, "reload --cert-path files when they change (GIE defaults to false; a rotated Secret should not need a restart)")
	fs.BoolVar(&f.healthChecking, "health-checking", false, "also serve gRPC health on the ext_proc port")
	fs.BoolVar(&f.leaderElection, "ha-enable-leader-election", false, "active-passive leader election (Kubernetes mode)")
	fs.BoolVar(&f.tracing, "tracing", true, "export OpenTelemetry traces over OTLP/gRPC (on, as GIE's binary; the manifests and GIE's chart pass --tracing=false); configured by OTEL_EXPORTER_OTLP_ENDPOINT (http://localhost:4317), OTEL_TRACES_EXPORTER (otlp, console, none), OTEL_TRACES_SAMPLER (parentbased_traceidratio), OTEL_TRACES_SAMPLER_ARG (0.1), OTEL_SERVICE_NAME (gateway-api-inference-extension/epp), OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT (512), SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED (false)")
	fs.Int64Var(&f.maxBody, "max-request-body-bytes", d.MaxRequestBodyBytes, "largest request body accepted (413 above)")
	fs.Int64Var(&f.maxBuffered, "max-buffered-request-bytes", d.MaxBufferedBytes, "process-wide budget of body bytes held while streams wait for the rest of a body (503 buffer_budget_exhausted beyond); bodies holding more than 256 KiB get three quarters of it, the rest is kept for small requests")
	fs.DurationVar(&f.requestBodyTimeout, "request-body-timeout", d.RequestBodyTimeout, "longest time from a stream's start until its request body is complete (408 body_timeout after)")
	fs.Int64Var(&f.grpcMaxStreamsTotal, "grpc-max-streams", d.MaxStreams, "most ext_proc streams open at once over every connection (RESOURCE_EXHAUSTED beyond); with --grpc-max-message-bytes it bounds what partial messages can hold")
	fs.IntVar(&f.grpcMaxMsg, "grpc-max-message-bytes", d.GRPCMaxRecvMsgSize, "largest ext_proc message (Envoy's body chunks stay within its 1 MiB buffer limit)")
	fs.BoolVar(&f.conformanceHeaders, "enable-conformance-test-headers", false, "honour test-epp-endpoint-selection on every request and echo x-conformance-test-served-endpoint to clients (GIE conformance runs and tests only: it lets clients choose the endpoint)")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", d.ShutdownGrace, "how long shutdown waits for open streams")
	fs.Uint64Var(&f.seed, "seed", 0, "seed for plugin randomness (0: random)")
	registerSelectionStrategy(fs, &f.selectionStrategy)
	f.log.register(fs)
	fs.IntVar(&f.msMetricsPort, "model-server-metrics-port", 0, "deprecated: metrics port of the model servers (0: the serving port)")
	fs.StringVar(&f.msMetricsScheme, "model-server-metrics-scheme", "", "deprecated: use metrics-data-source's scheme")
	fs.StringVar(&f.msMetricsPath, "model-server-metrics-path", "", "deprecated: use metrics-data-source's path")
	fs.BoolVar(&f.msInsecure, "model-server-metrics-https-insecure-skip-verify", true, "deprecated: use metrics-data-source's insecureSkipVerify")
	for _, m := range []struct {
		p    *string
		name string
	}{
		{&f.queuedMetric, "total-queued-requests-metric"},
		{&f.runningMetric, "total-running-requests-metric"},
		{&f.kvMetric, "kv-cache-usage-percentage-metric"},
		{&f.loraMetric, "lora-info-metric"},
		{&f.cacheInfoMetric, "cache-info-metric"},
	} {
		fs.StringVar(m.p, m.name, "", "deprecated and ignored: configure metrics with core-metrics-extractor engineConfigs")
	}
}

// serverConfig checks the flags and maps them to a server.Config.
func (f *serveFlags) serverConfig(fs *flag.FlagSet, logger logr.Logger) (server.Config, error) {
	var errs []string
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, p := range []struct {
		name string
		v    int
	}{{"grpc-port", f.grpcPort}, {"grpc-health-port", f.healthPort}} {
		if p.v < 0 || p.v > 65535 {
			errs = append(errs, fmt.Sprintf("--%s: must be 0..65535, got %d", p.name, p.v))
		}
	}
	if f.metricsPort < 0 || f.metricsPort > 65535 {
		errs = append(errs, fmt.Sprintf("--metrics-port: must be 0..65535, got %d", f.metricsPort))
	}
	for _, b := range []struct{ name, v string }{{"grpc-bind-address", f.grpcBind}, {"grpc-health-bind-address", f.healthBind}, {"metrics-bind-address", f.metricsBind}} {
		if err := checkBindAddress(b.v); err != nil {
			errs = append(errs, fmt.Sprintf("--%s: %v", b.name, err))
		}
	}
	if f.grpcMaxStreams == 0 || f.grpcMaxStreams > math.MaxUint32 {
		errs = append(errs, fmt.Sprintf("--grpc-max-concurrent-streams: must be 1..%d, got %d", uint32(math.MaxUint32), f.grpcMaxStreams))
	}
	for _, dflag := range []struct {
		name string
		v    time.Duration
	}{{"grpc-max-connection-idle", f.grpcMaxConnIdle}, {"grpc-max-connection-age", f.grpcMaxConnAge}, {"grpc-max-connection-age-grace", f.grpcMaxConnAgeGrace}} {
		if dflag.v < 0 {
			errs = append(errs, fmt.Sprintf("--%s: must be >= 0 (0: never), got %s", dflag.name, dflag.v))
		}
	}
	if f.grpcMaxConnAgeGrace > 0 && f.grpcMaxConnAge == 0 {
		errs = append(errs, "--grpc-max-connection-age-grace needs --grpc-max-connection-age")
	}
	if f.pprof && f.metricsPort != 0 && f.metricsTokenFile == "" && !(kubeModeFlags(f) && f.metricsAuth) {
		errs = append(errs, "--enable-pprof exposes heap, goroutine and CPU profiles and the command line: it needs --metrics-token-file (or, in Kubernetes mode, --metrics-endpoint-auth)")
	}
	if f.metricsTokenFile != "" && kubeModeFlags(f) && f.metricsAuth {
		errs = append(errs, "--metrics-token-file and --metrics-endpoint-auth both guard the metrics port; set --metrics-endpoint-auth=false to use a static token")
	}
	if f.configFile != "" && f.configText != "" {
		errs = append(errs, "--config-file and --config-text are mutually exclusive")
	}
	if f.decisionBuffer < 0 || f.decisionBuffer > decisions.MaxSize {
		errs = append(errs, fmt.Sprintf("--decision-buffer-size: must be in [0, %d], got %d", decisions.MaxSize, f.decisionBuffer))
	}
	if f.decisionEndpoints < 1 || f.decisionEndpoints > 1024 {
		errs = append(errs, fmt.Sprintf("--decision-max-endpoints: must be in [1, 1024], got %d", f.decisionEndpoints))
	}
	kubeMode := kubeModeFlags(f)
	switch {
	case f.endpointsFile == "" && !kubeMode:
		errs = append(errs, "no endpoint source: give --endpoints-file FILE (standalone mode), or --pool-name / --endpoint-selector (Kubernetes mode)")
	case f.endpointsFile != "" && f.endpointSelector != "":
		errs = append(errs, "--endpoints-file and --endpoint-selector are mutually exclusive")
	case f.endpointsFile != "" && f.leaderElection:
		errs = append(errs, "--ha-enable-leader-election needs Kubernetes mode (--pool-name or --endpoint-selector), not --endpoints-file")
	case f.poolName != "" && f.endpointSelector != "":
		errs = append(errs, "--pool-name and --endpoint-selector are mutually exclusive (GIE's InferencePool mode or its selector mode)")
	}
	if !kubeMode {
		if len(f.endpointTargetPorts) > 0 {
			errs = append(errs, "--endpoint-target-ports needs --endpoint-selector")
		}
		errs = append(errs, f.kube.standaloneErrors(set)...)
	}
	if f.refreshMetrics <= 0 || f.refreshProm <= 0 || f.staleness <= 0 {
		errs = append(errs, "--refresh-metrics-interval, --refresh-prometheus-metrics-interval and --metrics-staleness-threshold must be positive")
	}
	if f.maxBody <= 0 {
		errs = append(errs, fmt.Sprintf("--max-request-body-bytes: must be positive, got %d", f.maxBody))
	}
	if f.maxBuffered <= 0 {
		errs = append(errs, fmt.Sprintf("--max-buffered-request-bytes: must be positive, got %d", f.maxBuffered))
	} else if f.maxBody > 0 && f.maxBuffered-f.maxBuffered/4 < f.maxBody {
		errs = append(errs, fmt.Sprintf("--max-buffered-request-bytes: %d is less than 4/3 of --max-request-body-bytes (%d): a large body may use three quarters of the budget", f.maxBuffered, f.maxBody))
	}
	if f.requestBodyTimeout <= 0 {
		errs = append(errs, fmt.Sprintf("--request-body-timeout: must be positive, got %s", f.requestBodyTimeout))
	}
	if f.grpcMaxMsg < 64<<10 {
		errs = append(errs, fmt.Sprintf("--grpc-max-message-bytes: must be at least 65536, got %d", f.grpcMaxMsg))
	}
	if f.grpcMaxStreamsTotal <= 0 {
		errs = append(errs, fmt.Sprintf("--grpc-max-streams: must be positive, got %d", f.grpcMaxStreamsTotal))
	}
	if f.msMetricsScheme != "" && f.msMetricsScheme != "http" && f.msMetricsScheme != "https" {
		errs = append(errs, fmt.Sprintf("--model-server-metrics-scheme: must be http or https, got %q", f.msMetricsScheme))
	}
	if f.msMetricsPort < 0 || f.msMetricsPort > 65535 {
		errs = append(errs, fmt.Sprintf("--model-server-metrics-port: must be 0..65535, got %d", f.msMetricsPort))
	}
	strategy, strategySource, err := selectionStrategy(f.selectionStrategy)
	if err != nil {
		errs = append(errs, err.Error())
	}
	traceCfg, err := tracing.FromEnv(f.tracing, os.LookupEnv)
	if err != nil {
		errs = append(errs, "--tracing: "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	traceCfg.Global = true
	ms, msErrs := f.multisite.config(set, kubeMode && f.poolName != "")
	errs = append(errs, msErrs...)
	errs = append(errs, f.objectives.errors(set, kubeMode && f.poolName != "")...)
	if len(errs) > 0 {
		return server.Config{}, errors.New(strings.Join(errs, "\n"))
	}
	for _, name := range []string{"total-queued-requests-metric", "total-running-requests-metric", "kv-cache-usage-percentage-metric", "lora-info-metric", "cache-info-metric"} {
		if set[name] {
			// GIE v1.5 exits on these; its v1.5 chart still sets them for
			// non-vLLM engines, so Switchyard starts and says what to do.
			logger.Info("Deprecated flag ignored: configure metric names with core-metrics-extractor engineConfigs", "flag", "--"+name)
		}
	}
	if strategy != "" {
		logger.Info("Selection strategy chosen outside the configuration", "strategy", strategy, "from", strategySource)
	}
	if f.conformanceHeaders {
		logger.Info("--enable-conformance-test-headers is on: clients can choose the endpoint with test-epp-endpoint-selection; never use it in production")
	}
	if f.msMetricsPort != 0 && !kubeMode {
		logger.Info("--model-server-metrics-port is deprecated and applies to Kubernetes mode; endpoints-file entries set metricsPort per endpoint", "port", f.msMetricsPort)
	}
	pool := f.poolName
	if pool == "" {
		pool = "switchyard"
	}
	var (
		src           func(*datastore.Store) (server.EndpointSource, error)
		gatherers     []prometheus.Gatherer
		metricsFilter func(http.Handler) http.Handler
		poolNamespace = f.poolNamespace
	)
	var imports *kubeImports
	if kubeMode {
		km, err := f.kubeSource(logger)
		if err != nil {
			return server.Config{}, err
		}
		src, poolNamespace, metricsFilter = km.source, km.namespace, km.metricsFilter
		if f.endpointSelector != "" {
			pool = selectorPoolName()
		}
		gatherers = append(gatherers, ctrlmetrics.Registry)
		imports = &kubeImports{config: km.config, namespace: km.namespace, pool: f.poolName}
	}
	if imports != nil {
		f.multisite.addImports(ms, *imports, logger)
	}
	cfg := server.Config{
		Tracing:                          traceCfg,
		GRPCAddr:                         net.JoinHostPort(strings.Trim(f.grpcBind, "[]"), strconv.Itoa(f.grpcPort)),
		HealthAddr:                       net.JoinHostPort(strings.Trim(f.healthBind, "[]"), strconv.Itoa(f.healthPort)),
		MetricsTokenFile:                 f.metricsTokenFile,
		AdminTokenFile:                   f.adminTokenFile,
		GRPCMaxConcurrentStreams:         uint32(f.grpcMaxStreams),
		GRPCMaxConnectionIdle:            f.grpcMaxConnIdle,
		GRPCMaxConnectionAge:             f.grpcMaxConnAge,
		GRPCMaxConnectionAgeGrace:        f.grpcMaxConnAgeGrace,
		SecureServing:                    f.secure,
		CertPath:                         f.certPath,
		EnableCertReload:                 f.certReload,
		HealthChecking:                   f.healthChecking,
		EnablePprof:                      f.pprof,
		DecisionBufferSize:               f.decisionBuffer,
		DecisionEndpoints:                f.decisionEndpoints,
		EmitEndpointScores:               f.emitScores,
		ConfigFile:                       f.configFile,
		ConfigText:                       f.configText,
		EndpointsFile:                    f.endpointsFile,
		Source:                           src,
		Gatherers:                        gatherers,
		MetricsFilter:                    metricsFilter,
		LeaderElection:                   f.leaderElection && kubeMode,
		PoolName:                         pool,
		PoolNamespace:                    poolNamespace,
		RefreshMetricsInterval:           f.refreshMetrics,
		RefreshPrometheusMetricsInterval: f.refreshProm,
		MetricsStalenessThreshold:        f.staleness,
		DisableSubsetFilter:              f.disableSubset,
		MaxRequestBodyBytes:              f.maxBody,
		MaxBufferedBytes:                 f.maxBuffered,
		RequestBodyTimeout:               f.requestBodyTimeout,
		MaxStreams:                       f.grpcMaxStreamsTotal,
		GRPCMaxRecvMsgSize:               f.grpcMaxMsg,
		ConformanceTestHeaders:           f.conformanceHeaders,
		ShutdownGrace:                    f.shutdownGrace,
		Seed:                             f.seed,
		Logger:                           logger,
		SelectionStrategy:                strategy,
		Multisite:                        ms,
	}
	f.objectives.apply(&cfg, imports, f.poolGrp, logger)
	if f.metricsPort > 0 {
		cfg.MetricsAddr = net.JoinHostPort(strings.Trim(f.metricsBind, "[]"), strconv.Itoa(f.metricsPort))
	}
	if set["model-server-metrics-scheme"] || set["model-server-metrics-path"] || set["model-server-metrics-https-insecure-skip-verify"] {
		scheme, path, insecure := f.msMetricsScheme, f.msMetricsPath, f.msInsecure
		cfg.MetricsSourceOverride = func(p *metricssource.Params) {
			if scheme != "" {
				p.Scheme = scheme
			}
			if path != "" {
				p.Path = path
			}
			p.InsecureSkipVerify = insecure
		}
	}
	return cfg, nil
}

// kubeModeFlags reports whether the flags select Kubernetes mode.
func kubeModeFlags(f *serveFlags) bool {
	return f.endpointsFile == "" && (f.poolName != "" || f.endpointSelector != "")
}

// checkBindAddress accepts "" (every interface), an IP address or
// "localhost".
func checkBindAddress(v string) error {
	if v == "" || v == "localhost" {
		return nil
	}
	if _, err := netip.ParseAddr(strings.Trim(v, "[]")); err != nil {
		return fmt.Errorf("%q is not an IP address (the port is set by its own flag)", v)
	}
	return nil
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("epp serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: epp [serve] [flags]\n\nServe the endpoint picker. Flags (GIE's names and defaults):\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "epp serve: unexpected arguments %q\n", fs.Args())
		return 2
	}
	logger, err := f.log.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "epp serve: %v\n", err)
		return 2
	}
	cfg, err := f.serverConfig(fs, logger)
	if err != nil {
		fmt.Fprintf(stderr, "epp serve: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(cfg)
	if err != nil {
		logger.Error(err, "Cannot start")
		return 1
	}
	if err := srv.Run(ctx); err != nil {
		logger.Error(err, "Stopped with an error")
		return 1
	}
	logger.Info("Stopped")
	return 0
}
