package activehealthcheck

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// TestC50_Defaults: the guide's health_checks defaults — interval 30s,
// timeout 5s, unhealthy_threshold 3, healthy_threshold 2 — with vLLM's
// health path.
func TestC50_Defaults(t *testing.T) {
	p := DefaultParams()
	if p.Interval.Duration != 30*time.Second || p.Timeout.Duration != 5*time.Second ||
		p.UnhealthyThreshold != 3 || p.HealthyThreshold != 2 || p.Path != "/health" {
		t.Fatalf("defaults = %+v", p)
	}
	pl, err := Registration.Factory("hc", nil, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.(*Checker).p; got.Interval != p.Interval || got.UnhealthyThreshold != 3 {
		t.Errorf("the factory without parameters uses the defaults, got %+v", got)
	}
}

func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, append([]schedulingtest.FactoryCase{
		{Name: "defaults"},
		{Name: "every parameter", Params: `{"interval": "100ms", "timeout": "50ms", "unhealthyThreshold": 1, "healthyThreshold": 5, "path": "/ready?full=1", "port": 9000, "maxConcurrentProbes": 4}`,
			Check: func(t *testing.T, p scheduling.Plugin) {
				c := p.(*Checker)
				if c.p.Interval.Duration != 100*time.Millisecond || c.p.Port != 9000 || c.p.Path != "/ready?full=1" {
					t.Errorf("params = %+v", c.p)
				}
			}},
		{Name: "every problem", Params: `{"interval": "5ms", "timeout": "soon", "unhealthyThreshold": 0, "healthyThreshold": 101, "path": "health", "port": 70000, "maxConcurrentProbes": 0}`,
			WantErrs: []string{
				"interval: must be between 10ms and 1h0m0s, got 5ms",
				`timeout: invalid duration "soon"`,
				"unhealthyThreshold: must be 1..100, got 0",
				"healthyThreshold: must be 1..100, got 101",
				`path: must start with "/", got "health"`,
				"port: must be 1..65535, or 0 for the endpoint's serving port, got 70000",
				"maxConcurrentProbes: must be 1..1024, got 0",
			}},
		{Name: "path with a space", Params: `{"path": "/he alth"}`, WantErr: "path: must be a URL path"},
		{Name: "path with a fragment", Params: `{"path": "/health#x"}`, WantErr: "path: must be a URL path"},
		{Name: "interval as a number", Params: `{"interval": 30}`, WantErr: "interval"},
		{Name: "misspelled key", Params: `{"unhealthyTreshold": 2}`, WantErr: `unknown field "unhealthyTreshold"`},
	}, schedulingtest.DecodeErrorCases()...))
}

// env is a RunEnv over a settable endpoint list.
type env struct {
	mu      sync.Mutex
	eps     []*scheduling.Endpoint
	changed chan struct{}
}

func newEnv(eps ...*scheduling.Endpoint) *env { return &env{eps: eps, changed: make(chan struct{})} }

func (e *env) Endpoints() []*scheduling.Endpoint {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.eps
}

func (e *env) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

func (e *env) set(eps ...*scheduling.Endpoint) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.eps = eps
	close(e.changed)
	e.changed = make(chan struct{})
}

// scripted is a health endpoint whose n-th probe (from 1) answers
// status(n).
type scripted struct {
	probes atomic.Int64
	status func(n int64) int
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.probes.Add(1)
	if r.URL.Path != "/health" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.WriteHeader(s.status(n))
}

// endpointAt builds an endpoint at srv's address with a health the test
// watches: every verdict change is recorded with the probe count then.
func endpointAt(t *testing.T, name string, srv *httptest.Server) (*scheduling.Endpoint, *scheduling.EndpointHealth) {
	t.Helper()
	addr := strings.TrimPrefix(srv.URL, "http://")
	host, port, _ := strings.Cut(addr, ":")
	var p int
	for _, c := range port {
		p = p*10 + int(c-'0')
	}
	h := &scheduling.EndpointHealth{}
	return schedulingtest.Endpoint(name).Address(host).Port(p).Health(h).Build(), h
}

// run starts c.Run and returns its stop function.
func run(t *testing.T, c *Checker, e scheduling.RunEnv) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, e) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func newChecker(t testing.TB, params string) (*Checker, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Seed: 1})
	pl, err := Registration.Factory("hc", []byte(params), h)
	if err != nil {
		t.Fatal(err)
	}
	return pl.(*Checker), reg
}

// TestC50_ThresholdsDecideTheVerdict: the verdict changes exactly at the
// probe that completes a threshold — healthy after healthyThreshold passes
// in a row, unhealthy after unhealthyThreshold failures in a row, back
// after healthyThreshold passes — whatever the timing (probes are
// counted, not timed).
func TestC50_ThresholdsDecideTheVerdict(t *testing.T) {
	// Probes 1-2 pass, 3-4 fail, 5 passes (resets the failures), 6-8 fail,
	// 9 passes, 10 fails (resets the passes), 11-12 pass, then pass.
	fails := map[int64]bool{3: true, 4: true, 6: true, 7: true, 8: true, 10: true}
	sc := &scripted{status: func(n int64) int {
		if fails[n] {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}}
	srv := httptest.NewServer(sc)
	defer srv.Close()
	ep, h := endpointAt(t, "a", srv)
	type change struct {
		probe int64
		state scheduling.ProbeState
	}
	var mu sync.Mutex
	var changes []change
	h.SetNotify(func() {
		mu.Lock()
		changes = append(changes, change{sc.probes.Load(), h.Probe()})
		mu.Unlock()
	})
	c, reg := newChecker(t, `{"interval": "10ms", "timeout": "1s"}`) // thresholds: C-50's 3 and 2
	stop := run(t, c, newEnv(ep))
	deadline := time.Now().Add(10 * time.Second)
	for sc.probes.Load() < 14 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	want := []change{{2, scheduling.ProbeHealthy}, {8, scheduling.ProbeUnhealthy}, {12, scheduling.ProbeHealthy}}
	if len(changes) != len(want) {
		t.Fatalf("verdict changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Errorf("change %d = %+v, want %+v", i, changes[i], want[i])
		}
	}
	if got := value(c.m.transitions.WithLabelValues("unhealthy")); got != 1 {
		t.Errorf("unhealthy transitions = %v, want 1", got)
	}
	if got := value(c.m.probes.WithLabelValues("fail")); got != 6 {
		t.Errorf("failed probes = %v, want 6", got)
	}
	if n := series(t, reg, "switchyard_health_check_probes_total"); n != 2 {
		t.Errorf("probe series = %d, want 2 (pass, fail)", n)
	}
}

// TestC50_ProbeOutcomes: what passes and what fails.
func TestC50_ProbeOutcomes(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		// A body far beyond what is read: the probe passes without it.
		chunk := make([]byte, 64<<10)
		for range 64 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/health", http.StatusFound) })
	mux.HandleFunc("/error", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	closed := httptest.NewServer(mux)
	closedURL := closed.URL
	closed.Close()
	c, _ := newChecker(t, `{"timeout": "100ms"}`)
	for _, tt := range []struct {
		url  string
		pass bool
	}{
		{srv.URL + "/health", true},
		{srv.URL + "/big", true},
		{srv.URL + "/slow", false},
		{srv.URL + "/redirect", false},
		{srv.URL + "/error", false},
		{srv.URL + "/missing", false},
		{closedURL + "/health", false},
	} {
		err := c.probe(context.Background(), tt.url)
		if (err == nil) != tt.pass {
			t.Errorf("probe(%s) = %v, want pass=%v", tt.url, err, tt.pass)
		}
	}
}

// TestC50_BoundedConcurrency: at most maxConcurrentProbes probes are in
// flight, and every endpoint is still probed.
func TestC50_BoundedConcurrency(t *testing.T) {
	var cur, peak atomic.Int64
	seen := sync.Map{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		seen.Store(r.Header.Get("X-Test-Endpoint"), true)
		time.Sleep(20 * time.Millisecond)
	}))
	defer srv.Close()
	var eps []*scheduling.Endpoint
	for i := range 12 {
		e, _ := endpointAt(t, "ep-"+string(rune('a'+i)), srv)
		eps = append(eps, e)
	}
	c, _ := newChecker(t, `{"interval": "1h", "maxConcurrentProbes": 3}`)
	var probed atomic.Int64
	base := c.client.Transport
	c.client.Transport = roundTripper(func(r *http.Request) (*http.Response, error) {
		probed.Add(1)
		return base.RoundTrip(r)
	})
	run(t, c, newEnv(eps...))
	deadline := time.Now().Add(10 * time.Second)
	for probed.Load() < 12 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if probed.Load() != 12 {
		t.Fatalf("%d of 12 endpoints probed", probed.Load())
	}
	if p := peak.Load(); p > 3 || p < 1 {
		t.Errorf("peak concurrent probes = %d, want 1..3", p)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// New endpoints are probed as soon as they appear; departed ones are no
// longer probed; the instance's context stops Run.
func TestRunFollowsTheEndpoints(t *testing.T) {
	var hits sync.Map // endpoint port → count
	srvA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { count(&hits, "a") }))
	defer srvA.Close()
	srvB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { count(&hits, "b") }))
	defer srvB.Close()
	a, _ := endpointAt(t, "a", srvA)
	b, _ := endpointAt(t, "b", srvB)
	ctx, cancel := context.WithCancel(context.Background())
	h := scheduling.NewHandle(scheduling.HandleOptions{Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1}).ForInstance()
	pl, err := Registration.Factory("hc", []byte(`{"interval": "1h"}`), h)
	if err != nil {
		t.Fatal(err)
	}
	c := pl.(*Checker)
	e := newEnv(a)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(context.Background(), e) }()
	waitFor(t, func() bool { return load(&hits, "a") == 1 }, "a probed at once")
	e.set(a, b)
	waitFor(t, func() bool { return load(&hits, "b") == 1 }, "b probed as soon as it appeared")
	if load(&hits, "a") != 1 {
		t.Error("a probed again before its interval")
	}
	// A second Run returns at once.
	second := make(chan struct{})
	go func() { defer close(second); c.Run(context.Background(), e) }()
	select {
	case <-second:
	case <-time.After(5 * time.Second):
		t.Fatal("a second Run did not return")
	}
	h.Cancel() // the instance is dropped
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop with the instance's context")
	}
}

func count(m *sync.Map, k string) {
	v, _ := m.LoadOrStore(k, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func load(m *sync.Map, k string) int64 {
	v, ok := m.Load(k)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Close clears the verdicts of the endpoints it checked, unless a
// successor of the same name takes over, and no verdict lands afterwards.
func TestCloseClearsVerdicts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	defer srv.Close()
	for _, successor := range []bool{false, true} {
		ep, h := endpointAt(t, "a", srv)
		c, _ := newChecker(t, `{"interval": "10ms", "unhealthyThreshold": 1}`)
		stop := run(t, c, newEnv(ep))
		waitFor(t, func() bool { return h.Probe() == scheduling.ProbeUnhealthy }, "unhealthy")
		stop()
		c.Close(scheduling.CloseInfo{Successor: successor})
		want := scheduling.ProbeUnknown
		if successor {
			want = scheduling.ProbeUnhealthy
		}
		if got := h.Probe(); got != want {
			t.Errorf("successor=%v: probe state after Close = %v, want %v", successor, got, want)
		}
		if c.set(h, scheduling.ProbeHealthy) {
			t.Error("a verdict landed after Close")
		}
	}
}

// A successor adopts the verdicts its predecessor left; when a reload then
// removes it (Close without a successor), the adopted verdicts are cleared
// too: the endpoint comes back into rotation.
func TestCloseClearsAdoptedVerdicts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	defer srv.Close()
	ep, h := endpointAt(t, "a", srv)
	first, _ := newChecker(t, `{"interval": "10ms", "unhealthyThreshold": 1}`)
	stop := run(t, first, newEnv(ep))
	waitFor(t, func() bool { return h.Probe() == scheduling.ProbeUnhealthy }, "unhealthy")
	stop()
	first.Close(scheduling.CloseInfo{Successor: true})
	next, _ := newChecker(t, `{"interval": "1h", "unhealthyThreshold": 3}`)
	stop = run(t, next, newEnv(ep))
	time.Sleep(20 * time.Millisecond)
	if h.Probe() != scheduling.ProbeUnhealthy {
		t.Fatal("the successor did not keep the verdict")
	}
	stop()
	next.Close(scheduling.CloseInfo{})
	if ok, why := h.Eligible(time.Now()); !ok || h.Probe() != scheduling.ProbeUnknown {
		t.Errorf("after the checker was removed: eligible %v (%s), probe %v", ok, why, h.Probe())
	}
}

// Endpoints without a health (the host keeps none) are not probed.
func TestSkipsEndpointsWithoutHealth(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	with, _ := endpointAt(t, "with", srv)
	without := schedulingtest.Endpoint("without").Address("127.0.0.1").Port(with.Metadata().Port).Build()
	c, _ := newChecker(t, `{"interval": "1h"}`)
	run(t, c, newEnv(with, without))
	waitFor(t, func() bool { return hits.Load() >= 1 }, "probed")
	time.Sleep(50 * time.Millisecond)
	if n := hits.Load(); n != 1 {
		t.Errorf("%d probes, want 1 (the endpoint without health is skipped)", n)
	}
}

func TestPortOverride(t *testing.T) {
	c, _ := newChecker(t, `{"port": 9001, "path": "/ping"}`)
	ep := schedulingtest.Endpoint("a").Address("::1").Port(8000).Build()
	if got := c.url(ep); got != "http://[::1]:9001/ping" {
		t.Errorf("url = %s", got)
	}
}

// series counts the series of a metric family.
func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	m := &dto.Metric{}
	_ = c.Write(m)
	return m.GetCounter().GetValue()
}
