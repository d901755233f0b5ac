package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/pkg/decisions"
	"github.com/switchyard-ai/switchyard/pkg/grpcpool"
	"github.com/switchyard-ai/switchyard/pkg/server/health"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tokenauth"
)

// Fixed bounds of the listeners (the tunable ones are in Config).
const (
	// grpcMaxHeaderListSize bounds a stream's gRPC metadata (the HTTP
	// request's own headers travel inside the messages).
	grpcMaxHeaderListSize = 1 << 20
	// grpcStreamWindow and grpcConnWindow are the HTTP/2 flow-control
	// windows of the ext_proc listener (fixed: gRPC's dynamic windows grow
	// to 16 MiB). gRPC opens a stream's window to the size of the message
	// being read, so what a stream can make the EPP hold before a message is
	// complete is bounded by the largest message (Config.GRPCMaxRecvMsgSize),
	// not by these windows.
	grpcStreamWindow = 256 << 10
	grpcConnWindow   = 4 << 20
	// handshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface on the gRPC listeners.
	handshakeTimeout = 10 * time.Second
	// healthMaxStreams bounds concurrent health checks per connection.
	healthMaxStreams = 64
	// Metrics port HTTP bounds. The write timeout leaves room for
	// /debug/pprof/profile's default 30-second CPU profile.
	metricsReadHeaderTimeout = 10 * time.Second
	metricsReadTimeout       = 30 * time.Second
	metricsWriteTimeout      = 60 * time.Second
	metricsIdleTimeout       = 2 * time.Minute
	metricsMaxHeaderBytes    = 64 << 10
)

// debugOffMessage answers /debug/ paths when the metrics port has no
// authentication.
const debugOffMessage = "Not Found: the debug endpoints (/debug/endpoints, /debug/sites, /debug/decisions, /debug/pprof/) need authentication on the metrics port: " +
	"--metrics-token-file, or --metrics-endpoint-auth in Kubernetes mode\n"

func (s *Server) listen() error {
	var err error
	if s.grpcLis, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("ext_proc listener: %w", err)
	}
	if s.healthLis, err = net.Listen("tcp", s.cfg.HealthAddr); err != nil {
		return fmt.Errorf("health listener: %w", err)
	}
	if s.cfg.MetricsAddr != "" {
		if s.metricsLis, err = net.Listen("tcp", s.cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
	}
	maxStreams := s.cfg.GRPCMaxConcurrentStreams
	if maxStreams == 0 {
		maxStreams = DefaultGRPCMaxConcurrentStreams
	}
	maxMsg := s.cfg.GRPCMaxRecvMsgSize
	if maxMsg <= 0 {
		maxMsg = DefaultGRPCMaxRecvMsgSize
	}
	grpcOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxHeaderListSize(grpcMaxHeaderListSize),
		grpc.ConnectionTimeout(handshakeTimeout),
		// One ext_proc stream per HTTP request: a proxy opens another
		// connection when one connection's streams are all in use.
		grpc.MaxConcurrentStreams(maxStreams),
		// Fixed flow-control windows (see grpcStreamWindow).
		grpc.InitialWindowSize(grpcStreamWindow),
		grpc.InitialConnWindowSize(grpcConnWindow),
		// Proxies keep long-lived HTTP/2 connections; answer their pings,
		// refuse abusive ones, drop connections that died silently, and
		// close (with GOAWAY, so the proxy reconnects cleanly) ones that
		// carried no stream for a long time. A maximum connection age is
		// off by default: an LLM response can stream for minutes, and the
		// age's grace would cut it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  30 * time.Second,
			Timeout:               10 * time.Second,
			MaxConnectionIdle:     s.cfg.GRPCMaxConnectionIdle,
			MaxConnectionAge:      s.cfg.GRPCMaxConnectionAge,
			MaxConnectionAgeGrace: s.cfg.GRPCMaxConnectionAgeGrace,
		}),
		grpc.ChainStreamInterceptor(s.limitStreams, s.recoverStream),
		experimental.BufferPool(grpcpool.Pool), // see package grpcpool
	}
	if s.cfg.SecureServing {
		var getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
		if s.cfg.CertPath != "" {
			s.certs, err = tlsutil.NewReloader(s.cfg.CertPath, s.log.WithName("tls"), tlsutil.WithRegisterer(s.reg))
			if err != nil {
				return err
			}
			getCert = s.certs.GetCertificate
		} else {
			cert, err := tlsutil.SelfSigned(nil, 10*365*24*time.Hour)
			if err != nil {
				return fmt.Errorf("self-signed certificate: %w", err)
			}
			getCert = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsutil.ServerConfig(getCert))))
	}
	s.grpcSrv = grpc.NewServer(grpcOpts...)
	extprocv3.RegisterExternalProcessorServer(s.grpcSrv, s.ext)
	if s.cfg.HealthChecking {
		hs := grpchealth.NewServer()
		s.extHealth = hs
		hs.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", healthpb.HealthCheckResponse_SERVING)
		healthpb.RegisterHealthServer(s.grpcSrv, hs)
	}
	s.checker = health.New(s.ready, s.cfg.LeaderElection)
	s.healthSrv = grpc.NewServer(
		grpc.MaxRecvMsgSize(64<<10),
		grpc.MaxHeaderListSize(64<<10),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.MaxConcurrentStreams(healthMaxStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute}),
	)
	health.Register(s.healthSrv, s.checker)
	if s.metricsLis != nil {
		h, err := s.metricsHandler()
		if err != nil {
			return err
		}
		s.metricsSrv = &http.Server{
			Handler:           h,
			ReadHeaderTimeout: metricsReadHeaderTimeout,
			ReadTimeout:       metricsReadTimeout,
			WriteTimeout:      metricsWriteTimeout,
			IdleTimeout:       metricsIdleTimeout,
			MaxHeaderBytes:    metricsMaxHeaderBytes,
		}
	}
	return nil
}

// metricsHandler is the metrics port: /metrics, and the debug endpoints
// when the port is authenticated (Config.MetricsFilter or
// Config.MetricsTokenFile guard every path then).
func (s *Server) metricsHandler() (http.Handler, error) {
	var guard func(http.Handler) http.Handler
	switch {
	case s.cfg.MetricsFilter != nil && s.cfg.MetricsTokenFile != "":
		return nil, errors.New("--metrics-token-file and --metrics-endpoint-auth both guard the metrics port; use one (turn --metrics-endpoint-auth off to use a static token)")
	case s.cfg.MetricsFilter != nil:
		guard = s.cfg.MetricsFilter
	case s.cfg.MetricsTokenFile != "":
		g, err := tokenauth.New(s.cfg.MetricsTokenFile, s.log.WithName("metrics-token"))
		if err != nil {
			return nil, fmt.Errorf("--metrics-token-file: %w", err)
		}
		s.tokens = g
		guard = g.Wrap
	}
	if s.cfg.EnablePprof && guard == nil {
		return nil, errors.New("--enable-pprof exposes heap, goroutine and CPU profiles and the command line: it needs authentication on the metrics port (--metrics-token-file, or --metrics-endpoint-auth in Kubernetes mode)")
	}
	mux := http.NewServeMux()
	gatherers := append(firstWins{s.reg}, s.cfg.Gatherers...)
	mux.Handle("/metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{Registry: s.reg, ErrorHandling: promhttp.ContinueOnError}))
	if guard == nil {
		mux.HandleFunc("/debug/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, debugOffMessage, http.StatusNotFound)
		})
		return s.withAdmin(mux)
	}
	mux.HandleFunc("/debug/endpoints", s.serveEndpoints)
	mux.HandleFunc("/debug/sites", s.serveSites)
	mux.Handle("/debug/decisions", decisions.Handler(s.decisions))
	if s.cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return s.withAdmin(guard(mux))
}

// limitStreams bounds the ext_proc streams open at once over every
// connection (Config.MaxStreams): the per-connection limit alone would let
// a client that opens many connections hold unbounded streams. A stream
// beyond the limit fails at once with RESOURCE_EXHAUSTED (the proxy's
// ext_proc failure mode then applies) and is counted.
func (s *Server) limitStreams(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	limit := s.cfg.MaxStreams
	if limit <= 0 {
		limit = DefaultMaxStreams
	}
	if n := s.streams.Add(1); n > limit {
		s.streams.Add(-1)
		s.streamsRejected.Inc()
		// Load-caused, like the refusals of a request (pkg/extproc): one
		// line at V(1).
		s.log.V(1).Info("ext_proc stream refused: too many open streams", "limit", limit)
		return status.Errorf(codes.ResourceExhausted, "the endpoint picker has %d ext_proc streams open, its limit (--grpc-max-streams)", limit)
	}
	defer s.streams.Add(-1)
	return handler(srv, ss)
}

// registerStreamMetrics exposes the open-stream count and the refusals of
// limitStreams.
func (s *Server) registerStreamMetrics() error {
	s.streamsRejected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_extproc_streams_rejected_total",
		Help: "ext_proc streams refused with RESOURCE_EXHAUSTED because --grpc-max-streams streams were open.",
	})
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_extproc_streams_open",
		Help: "ext_proc streams open now, over every connection.",
	}, func() float64 { return float64(s.streams.Load()) })
	for _, c := range []prometheus.Collector{s.streamsRejected, open} {
		if err := s.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
