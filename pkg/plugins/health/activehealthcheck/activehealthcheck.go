// Package activehealthcheck implements the active-health-check plugin
// (C-50): a background probe of every endpoint's health path (vLLM's
// /health by default) that takes an endpoint out of rotation after
// unhealthyThreshold failed probes in a row and brings it back after
// healthyThreshold passes. It is a scheduling.Runner: the host runs it
// once the configuration serves, off the request path, and it writes its
// verdicts to each endpoint's scheduling.EndpointHealth (SetProbe), which
// the datastore turns into the published routable set.
//
// A probe is an HTTP GET of http://<endpoint address>:<port><path> with
// the probe timeout; a 2xx status passes, anything else (connection
// refused, timeout, another status, a redirect) fails. At most
// maxConcurrentProbes run at once, each endpoint has at most one probe in
// flight, at most MaxBodyBytes of a response body are read, connections
// are not kept alive (a probe tests that the server accepts connections)
// and no proxy is used.
//
// Each endpoint is probed as soon as it appears, then every interval.
// Endpoints start ProbeUnknown, which is eligible: an endpoint serves
// before its first verdict, as it does without health checks.
package activehealthcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/plugins/health/internal/healthparam"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "active-health-check"

// MaxBodyBytes is the most of a probe response's body that is read.
const MaxBodyBytes = 4 << 10

// Bounds of the parameters.
const (
	minInterval   = 10 * time.Millisecond
	maxInterval   = time.Hour
	minTimeout    = time.Millisecond
	maxTimeout    = 5 * time.Minute
	maxThreshold  = 100
	maxProbes     = 1024
	maxPathLength = 1024
)

// Params are the plugin's parameters (C-50's health_checks).
type Params struct {
	// Interval between two probes of an endpoint; default 30s
	// (10ms..1h).
	Interval healthparam.Duration `json:"interval"`
	// Timeout of one probe, connection included; default 5s (1ms..5m).
	Timeout healthparam.Duration `json:"timeout"`
	// UnhealthyThreshold is how many failed probes in a row take an
	// endpoint out of rotation; default 3 (1..100).
	UnhealthyThreshold int `json:"unhealthyThreshold"`
	// HealthyThreshold is how many passed probes in a row bring it back;
	// default 2 (1..100).
	HealthyThreshold int `json:"healthyThreshold"`
	// Path is the URL path probed; default /health (vLLM's; SGLang serves
	// /health too). It may carry a query.
	Path string `json:"path"`
	// Port is the port probed; 0 (default) is the endpoint's serving port.
	Port int `json:"port"`
	// MaxConcurrentProbes bounds the probes in flight; default 16
	// (1..1024).
	MaxConcurrentProbes int `json:"maxConcurrentProbes"`
}

// DefaultParams returns C-50's defaults.
func DefaultParams() Params {
	return Params{
		Interval:            healthparam.D(30 * time.Second),
		Timeout:             healthparam.D(5 * time.Second),
		UnhealthyThreshold:  3,
		HealthyThreshold:    2,
		Path:                "/health",
		MaxConcurrentProbes: 16,
	}
}

// Validate reports every invalid parameter, prefixed with its name.
func (p *Params) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(p.Interval.Check("interval", minInterval, maxInterval))
	add(p.Timeout.Check("timeout", minTimeout, maxTimeout))
	for _, f := range []struct {
		name string
		v    int
	}{{"unhealthyThreshold", p.UnhealthyThreshold}, {"healthyThreshold", p.HealthyThreshold}} {
		if f.v < 1 || f.v > maxThreshold {
			add(fmt.Errorf("%s: must be 1..%d, got %d", f.name, maxThreshold, f.v))
		}
	}
	switch {
	case !strings.HasPrefix(p.Path, "/"):
		add(fmt.Errorf("path: must start with \"/\", got %q", p.Path))
	case len(p.Path) > maxPathLength:
		add(fmt.Errorf("path: must be at most %d bytes, got %d", maxPathLength, len(p.Path)))
	case strings.ContainsAny(p.Path, "#") || strings.ContainsFunc(p.Path, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		add(fmt.Errorf("path: must be a URL path (and query) without spaces, control characters or fragment, got %q", p.Path))
	}
	if p.Port < 0 || p.Port > 65535 {
		add(fmt.Errorf("port: must be 1..65535, or 0 for the endpoint's serving port, got %d", p.Port))
	}
	if p.MaxConcurrentProbes < 1 || p.MaxConcurrentProbes > maxProbes {
		add(fmt.Errorf("maxConcurrentProbes: must be 1..%d, got %d", maxProbes, p.MaxConcurrentProbes))
	}
	return errors.Join(errs...)
}

// Checker is an active-health-check instance.
type Checker struct {
	typedName scheduling.TypedName
	p         Params
	log       logr.Logger
	ctx       context.Context // the instance's Handle context
	client    *http.Client
	m         *checkMetrics
	running   atomic.Bool

	// mu orders the verdicts Run writes with Close's reset, so that no
	// verdict lands after the reset.
	mu     sync.Mutex
	closed bool
	// checked are the healths of the endpoints this instance checks (its
	// verdicts, and those of the instance it succeeded, live there).
	checked map[*scheduling.EndpointHealth]struct{}
}

// New returns an active-health-check. It starts nothing: the host calls
// Run once the configuration serves.
func New(name string, p Params, h scheduling.Handle) (*Checker, error) {
	if name == "" {
		name = Type
	}
	m, err := newCheckMetrics(h.Registerer())
	if err != nil {
		return nil, err
	}
	timeout := p.Timeout.Duration
	transport := &http.Transport{
		Proxy:                  nil, // probes go straight to the endpoint
		DialContext:            (&net.Dialer{Timeout: timeout}).DialContext,
		DisableKeepAlives:      true,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 16 << 10,
		DisableCompression:     true,
	}
	return &Checker{
		typedName: scheduling.TypedName{Type: Type, Name: name},
		p:         p,
		log:       h.Logger().WithValues("plugin", name),
		ctx:       h.Context(),
		client: &http.Client{
			Transport:     transport,
			Timeout:       timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		m: m,
	}, nil
}

// TypedName implements scheduling.Plugin.
func (c *Checker) TypedName() scheduling.TypedName { return c.typedName }

// target is one endpoint as the run loop tracks it. Only the loop touches
// it.
type target struct {
	key      string
	url      string
	health   *scheduling.EndpointHealth
	next     time.Time
	inFlight bool
	fails    int
	passes   int
	lastErr  string
}

// result is one probe's outcome.
type result struct {
	t   *target
	err error // nil: passed
}

// Run implements scheduling.Runner: it probes the endpoints until ctx or
// the instance's context ends, and returns once its probes have stopped.
// A second concurrent Run returns at once.
func (c *Checker) Run(ctx context.Context, env scheduling.RunEnv) {
	if !c.running.CompareAndSwap(false, true) {
		c.log.Error(errors.New("already running"), "Run called twice")
		return
	}
	defer c.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()

	var wg sync.WaitGroup
	// Probes end with ctx; none blocks on its result (the channel has a
	// slot for each), and none is applied once Run returns.
	defer wg.Wait()
	results := make(chan result, c.p.MaxConcurrentProbes)
	targets := map[string]*target{}
	busy := 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	c.log.V(1).Info("Active health checks started", "interval", c.p.Interval.Duration, "timeout", c.p.Timeout.Duration,
		"path", c.p.Path, "unhealthyThreshold", c.p.UnhealthyThreshold, "healthyThreshold", c.p.HealthyThreshold)
	changed := env.Changed()
	c.sync(targets, env.Endpoints())
	for {
		now := time.Now()
		wait := time.Hour
		for _, t := range targets {
			if t.inFlight {
				continue
			}
			if d := t.next.Sub(now); d > 0 {
				wait = min(wait, d)
				continue
			}
			if busy == c.p.MaxConcurrentProbes {
				continue // due: a result frees a slot and wakes the loop
			}
			t.inFlight = true
			t.next = now.Add(c.p.Interval.Duration)
			busy++
			wg.Go(func() { results <- result{t: t, err: c.probe(ctx, t.url)} })
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-changed:
			changed = env.Changed()
			c.sync(targets, env.Endpoints())
		case <-timer.C:
		case r := <-results:
			busy--
			r.t.inFlight = false
			if targets[r.t.key] == r.t {
				c.apply(r.t, r.err)
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// sync makes targets the current endpoints: new ones are probed at once,
// departed ones dropped, an endpoint whose health changed (a new
// identity under the same key) starts afresh.
func (c *Checker) sync(targets map[string]*target, eps []*scheduling.Endpoint) {
	seen := make(map[string]struct{}, len(eps))
	live := make(map[*scheduling.EndpointHealth]struct{}, len(eps))
	for _, e := range eps {
		h, ok := scheduling.HealthKey.Get(e)
		if !ok || h == nil {
			continue // the host keeps no health for it
		}
		key := e.Key()
		seen[key] = struct{}{}
		live[h] = struct{}{}
		url := c.url(e)
		if t := targets[key]; t != nil && t.health == h && t.url == url {
			continue
		}
		targets[key] = &target{key: key, url: url, health: h}
	}
	for k := range targets {
		if _, ok := seen[k]; !ok {
			delete(targets, k)
		}
	}
	c.mu.Lock()
	if !c.closed {
		c.checked = live
	}
	c.mu.Unlock()
}

// url returns the probe URL of an endpoint.
func (c *Checker) url(e *scheduling.Endpoint) string {
	hp := e.HostPort()
	if c.p.Port != 0 {
		hp = net.JoinHostPort(e.Metadata().Address, strconv.Itoa(c.p.Port))
	}
	return "http://" + hp + c.p.Path
}

// probe runs one probe: nil when the endpoint answered 2xx in time.
func (c *Checker) probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, c.p.Timeout.Duration)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "switchyard-health-check")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBodyBytes))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	return nil
}

// apply counts a probe's outcome and writes a verdict when a threshold is
// reached.
func (c *Checker) apply(t *target, err error) {
	if err == nil {
		c.m.probes.WithLabelValues("pass").Inc()
		t.passes++
		t.fails = 0
		if t.passes >= c.p.HealthyThreshold {
			if prev := t.health.Probe(); prev != scheduling.ProbeHealthy && c.set(t.health, scheduling.ProbeHealthy) {
				c.m.transitions.WithLabelValues("healthy").Inc()
				if prev == scheduling.ProbeUnhealthy {
					c.log.Info("Endpoint passed its health checks; back in rotation", "endpoint", t.key, "passes", t.passes)
				} else {
					c.log.V(1).Info("Endpoint healthy", "endpoint", t.key)
				}
			}
		}
		c.log.V(4).Info("Health probe passed", "endpoint", t.key)
		return
	}
	c.m.probes.WithLabelValues("fail").Inc()
	t.fails++
	t.passes = 0
	t.lastErr = err.Error()
	if t.fails >= c.p.UnhealthyThreshold && t.health.Probe() != scheduling.ProbeUnhealthy && c.set(t.health, scheduling.ProbeUnhealthy) {
		c.m.transitions.WithLabelValues("unhealthy").Inc()
		c.log.Info("Endpoint failed its health checks; out of rotation", "endpoint", t.key, "failures", t.fails, "error", t.lastErr)
	}
	c.log.V(4).Info("Health probe failed", "endpoint", t.key, "error", t.lastErr)
}

// set writes a verdict unless the instance is closed.
func (c *Checker) set(h *scheduling.EndpointHealth, s scheduling.ProbeState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	return h.SetProbe(s)
}

// Close implements scheduling.Closer. The instance's context has ended,
// so Run stops. Unless another instance of the same name takes over
// (info.Successor, which continues from the verdicts), the verdicts of
// the endpoints it checked are cleared: endpoints it took out come back
// into rotation, since nothing checks them any more.
func (c *Checker) Close(info scheduling.CloseInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if !info.Successor {
		for h := range c.checked {
			h.SetProbe(scheduling.ProbeUnknown)
		}
	}
	c.checked = nil
}

// checkMetrics are the plugin's collectors, shared by its instances.
type checkMetrics struct {
	probes      *prometheus.CounterVec
	transitions *prometheus.CounterVec
}

func newCheckMetrics(reg prometheus.Registerer) (*checkMetrics, error) {
	probes, err := healthparam.RegisterOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_health_check_probes_total",
		Help: "Active health-check probes, by result (pass: 2xx in time; fail: anything else).",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	transitions, err := healthparam.RegisterOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_health_check_transitions_total",
		Help: "Endpoint health verdicts changed by active health checks, by the verdict reached (healthy, unhealthy).",
	}, []string{"to"}))
	if err != nil {
		return nil, err
	}
	return &checkMetrics{probes: probes, transitions: transitions}, nil
}

// Registration registers the active-health-check type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Runner = (*Checker)(nil)
	_ scheduling.Closer = (*Checker)(nil)
)
