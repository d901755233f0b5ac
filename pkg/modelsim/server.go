package modelsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// MetricsFault selects how GET /metrics misbehaves.
type MetricsFault int32

const (
	// MetricsOK serves the metrics normally.
	MetricsOK MetricsFault = iota
	// MetricsGarbage answers 200 with text no Prometheus parser accepts.
	MetricsGarbage
	// MetricsSlow never answers: the handler hangs until the client gives
	// up (its request context ends) or the server closes.
	MetricsSlow
	// Metrics500 answers 500 Internal Server Error.
	Metrics500
	// MetricsNaN, MetricsInf and MetricsNegative serve valid metrics whose
	// load gauges (waiting and running requests, KV-cache usage) read NaN,
	// +Inf or -5: a broken exporter whose values must not look idle.
	MetricsNaN
	MetricsInf
	MetricsNegative
)

var metricsFaultNames = [...]string{"ok", "garbage", "slow", "500", "nan", "inf", "negative"}

// String returns the name ParseMetricsFault accepts.
func (f MetricsFault) String() string {
	if f >= 0 && int(f) < len(metricsFaultNames) {
		return metricsFaultNames[f]
	}
	return fmt.Sprintf("MetricsFault(%d)", int32(f))
}

// ParseMetricsFault parses "ok", "garbage", "slow", "500", "nan", "inf"
// or "negative".
func ParseMetricsFault(s string) (MetricsFault, error) {
	for i, name := range metricsFaultNames {
		if s == name {
			return MetricsFault(i), nil
		}
	}
	return MetricsOK, fmt.Errorf("unknown metrics fault %q (want one of %s)", s, strings.Join(metricsFaultNames[:], ", "))
}

// Option customises a Server.
type Option func(*options)

type options struct {
	log logr.Logger
	id  string
}

// WithLogger sets the logger (default: discard). V(1) logs life-cycle and
// fault-switch changes, V(4) every request's admission, preemption and end.
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithID sets the server's identity, echoed in the x-modelsim-id response
// header of every response so tests can tell which endpoint answered. Empty
// (the default) sends no such header.
func WithID(id string) Option { return func(o *options) { o.id = id } }

// Header names the server reads or writes.
const (
	// HeaderID is the response header carrying the server identity (WithID).
	HeaderID = "x-modelsim-id"
	// HeaderRequestID is echoed from request to response, and names the
	// response id ("cmpl-<x-request-id>") as vLLM does.
	HeaderRequestID = "x-request-id"
)

// Server is one simulated vLLM server: an engine plus its HTTP surface.
// Create it with New, serve Handler (or call Serve), and Start the engine.
type Server struct {
	cfg     Config
	log     logr.Logger
	id      string
	eng     *engine
	regs    *registries
	handler http.Handler
	created int64

	errorRate    atomic.Uint64 // math.Float64bits
	extraLatency atomic.Int64  // time.Duration
	metricsFault atomic.Int32
	rateLimit    atomic.Pointer[RateLimit] // ratelimit.go; nil: no headers
	idSeq        atomic.Uint64
	faultSeq     atomic.Uint64
	ready        atomic.Bool

	mu      sync.Mutex
	started bool
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

var errStarted = errors.New("modelsim: server already started")

// New validates cfg and builds a server. The engine does not run until
// Start.
func New(cfg Config, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid modelsim config: %w", err)
	}
	o := options{log: logr.Discard()}
	for _, opt := range opts {
		opt(&o)
	}
	cfg.LoRAs = append([]string(nil), cfg.LoRAs...)
	labels := prometheus.Labels{"model_name": cfg.Model, "engine": "0"}
	m := newEngineMetrics(labels)
	eng := newEngine(cfg, m, o.log)
	regs, err := newRegistries(eng, m, labels)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s := &Server{
		cfg:     cfg,
		log:     o.log,
		id:      o.id,
		eng:     eng,
		regs:    regs,
		created: time.Now().Unix(),
		stop:    make(chan struct{}),
	}
	s.handler = s.withRateLimit(s.routes())
	return s, nil
}

// Config returns the server's configuration.
func (s *Server) Config() Config {
	c := s.cfg
	c.LoRAs = append([]string(nil), c.LoRAs...)
	return c
}

// ID returns the identity set with WithID.
func (s *Server) ID() string { return s.id }

// Handler returns the HTTP handler of all routes: POST /v1/completions,
// POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics.
func (s *Server) Handler() http.Handler { return s.handler }

// Start starts the engine loop. It runs until ctx is done or Close is
// called; either way requests in flight then fail (503, or an error event
// on a stream) and /health turns 503. Start may be called once.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return errStarted
	}
	s.started = true
	s.done = make(chan struct{})
	s.ready.Store(true)
	go func() {
		defer close(s.done)
		defer s.ready.Store(false)
		s.eng.run(ctx, s.stop)
	}()
	s.log.V(1).Info("modelsim engine started", "model", s.cfg.Model, "id", s.id)
	return nil
}

// Close stops the engine, fails every waiting and running request cleanly,
// and releases handlers blocked on a slow /metrics. It waits for the engine
// goroutine to exit and is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.ready.Store(false)
	close(s.stop)
	done := s.done
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	s.eng.shutdown(ErrClosed)
	s.log.V(1).Info("modelsim closed", "id", s.id)
	return nil
}

// SetErrorRate makes the fraction p (clamped to [0,1]) of generation
// requests fail with 500 and an OpenAI-style error body. Which requests fail
// is deterministic given Config.Seed and the order of arrival.
func (s *Server) SetErrorRate(p float64) {
	if math.IsNaN(p) || p < 0 {
		p = 0
	}
	p = min(p, 1)
	s.errorRate.Store(math.Float64bits(p))
	s.log.V(1).Info("error rate set", "rate", p, "id", s.id)
}

// SetExtraLatency adds d (not scaled by TimeScale) before every generation
// request enters the engine, i.e. before its first byte. Negative means 0.
func (s *Server) SetExtraLatency(d time.Duration) {
	d = max(d, 0)
	s.extraLatency.Store(int64(d))
	s.log.V(1).Info("extra latency set", "latency", d, "id", s.id)
}

// SetMetricsFault changes how /metrics answers from the next scrape on.
func (s *Server) SetMetricsFault(f MetricsFault) {
	s.metricsFault.Store(int32(f))
	s.log.V(1).Info("metrics fault set", "fault", f.String(), "id", s.id)
}

// Stats returns a snapshot of the engine.
func (s *Server) Stats() Stats { return s.eng.stats() }

// Serve starts the engine if it is not running yet and serves HTTP on ln
// until ctx is done, then closes the server (failing requests in flight) and
// shuts the listener down gracefully. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.Start(ctx); err != nil && !errors.Is(err, errStarted) {
		_ = ln.Close()
		return err
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		_ = s.Close()
		return err
	case <-ctx.Done():
	}
	_ = s.Close()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// ListenAndServe runs a simulator on addr (host:port) until ctx is done.
func ListenAndServe(ctx context.Context, addr string, cfg Config, opts ...Option) error {
	s, err := New(cfg, opts...)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}
