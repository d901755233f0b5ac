package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/gateway"
	"github.com/switchyard-ai/switchyard/pkg/modelsim"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// sim is a modelsim server on 127.0.0.1 that a test can kill and revive
// on the same port.
type sim struct {
	t    *testing.T
	id   string
	port int

	mu     sync.Mutex
	server *modelsim.Server
	hs     *http.Server
	cancel context.CancelFunc
}

func startSim(t *testing.T, id string, port int) *sim {
	t.Helper()
	s := &sim{t: t, id: id, port: port}
	s.revive()
	t.Cleanup(s.kill)
	return s
}

// revive starts a fresh model server on the sim's port (any port the
// first time).
func (s *sim) revive() {
	s.t.Helper()
	cfg := modelsim.DefaultConfig()
	cfg.TimeScale = 0
	srv, err := modelsim.New(cfg, modelsim.WithID(s.id))
	require.NoError(s.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(s.t, srv.Start(ctx))
	var lis net.Listener
	for range 50 { // the port may linger briefly after a kill
		if lis, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(s.t, err)
	s.port = lis.Addr().(*net.TCPAddr).Port
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: time.Second}
	go func() { _ = hs.Serve(lis) }()
	s.mu.Lock()
	s.server, s.hs, s.cancel = srv, hs, cancel
	s.mu.Unlock()
}

// kill stops the server: connections are refused from now on.
func (s *sim) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hs == nil {
		return
	}
	_ = s.hs.Close()
	_ = s.server.Close()
	s.cancel()
	s.hs = nil
}

func (s *sim) sim() *modelsim.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.server
}

// fleet starts n sims and writes an endpoints file naming them sim-<i>.
func fleet(t *testing.T, n int) ([]*sim, string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("endpoints:\n")
	var out []*sim
	for i := range n {
		s := startSim(t, fmt.Sprintf("sim-%d", i), 0)
		out = append(out, s)
		fmt.Fprintf(&b, "- name: sim-%d\n  address: 127.0.0.1\n  port: %d\n", i, s.port)
	}
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return out, path
}

// withGateway puts the test gateway (Envoy's part) in front of the EPP
// and returns its URL.
func withGateway(t *testing.T, s *Server) (string, *http.Client) {
	t.Helper()
	gw, err := gateway.New(gateway.Options{EPPAddr: s.GRPCAddr()})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: gw, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	client := &http.Client{Timeout: 20 * time.Second}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = hs.Shutdown(sctx)
		cancel()
		gw.Close()
	})
	return "http://" + ln.Addr().String(), client
}

// complete sends a buffered completion through the gateway and returns the
// status and the model server that answered.
func complete(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"prompt":"hello","max_tokens":2}`, modelsim.DefaultModel)
	resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewBufferString(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(modelsim.HeaderID)
}

// outOfRotation is why the store holds the endpoint out ("" when routable).
func outOfRotation(s *Server, name string) string {
	sn := s.Store().Snapshot()
	e, ok := sn.Lookup(name)
	if !ok {
		return datastore.OutNotInPool
	}
	return sn.OutOfRotation(e)
}

func healthOf(t *testing.T, s *Server, name string) *scheduling.EndpointHealth {
	t.Helper()
	e, ok := s.Store().Snapshot().Lookup(name)
	require.True(t, ok)
	h, _ := scheduling.HealthKey.Get(e)
	return h
}

// waitUntil polls cond and returns how long it took to hold.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

const healthCheckConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: active-health-check
  parameters:
    interval: %s
    timeout: 100ms
    unhealthyThreshold: 3
    healthyThreshold: 2
- type: random-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: random-picker
`

// TestC50_KilledEndpointLeavesRotationAndReturns: through a real gateway,
// EPP and modelsim servers on 127.0.0.1, an endpoint whose server is
// killed leaves rotation within unhealthyThreshold × interval (plus the
// publish) and receives no request while out; revived on the same port, it
// returns after healthyThreshold passed probes. No request fails: the
// gateway falls back while the probes decide.
func TestC50_KilledEndpointLeavesRotationAndReturns(t *testing.T) {
	const interval = 200 * time.Millisecond
	sims, file := fleet(t, 3)
	s, _ := run(t, Config{EndpointsFile: file, ConfigText: fmt.Sprintf(healthCheckConfig, interval)})
	url, client := withGateway(t, s)
	waitUntil(t, 5*time.Second, "the serving configuration's runner started", func() bool {
		return len(s.runners.names()) == 1 && s.runners.names()[0] == "active-health-check"
	})
	waitUntil(t, 5*time.Second, "every endpoint healthy", func() bool {
		for _, n := range []string{"sim-0", "sim-1", "sim-2"} {
			if healthOf(t, s, n).Probe() != scheduling.ProbeHealthy {
				return false
			}
		}
		return true
	})

	sims[1].kill()
	took := waitUntil(t, 10*time.Second, "sim-1 out of rotation", func() bool { return outOfRotation(s, "sim-1") == datastore.OutUnhealthy })
	t.Logf("killed endpoint left rotation after %s (bound %s)", took.Round(time.Millisecond), 3*interval)
	// The third failed probe starts at most 3 × interval after the kill
	// (the first within an interval, then one per interval; a refused
	// connection fails at once); the rest is the publish, and slack for a
	// loaded machine.
	require.LessOrEqual(t, took, 3*interval+500*time.Millisecond)
	for i := range 30 {
		code, id := complete(t, client, url)
		require.Equal(t, http.StatusOK, code, "request %d", i)
		require.NotEqual(t, "sim-1", id, "request %d went to the unhealthy endpoint", i)
	}

	sims[1].revive()
	took = waitUntil(t, 10*time.Second, "sim-1 back in rotation", func() bool { return outOfRotation(s, "sim-1") == "" })
	t.Logf("revived endpoint returned after %s (two passes, %s apart)", took.Round(time.Millisecond), interval)
	require.GreaterOrEqual(t, took, interval-50*time.Millisecond, "it needs healthyThreshold (2) passes, an interval apart")
	require.LessOrEqual(t, took, 2*interval+500*time.Millisecond)
	waitUntil(t, 10*time.Second, "sim-1 serves again", func() bool {
		code, id := complete(t, client, url)
		require.Equal(t, http.StatusOK, code)
		return id == "sim-1"
	})
}

const breakerConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: circuit-breaker
  parameters:
    consecutiveFailures: 2
    openDuration: 600ms
    halfOpenRequests: 1
    successThreshold: 2
    latencyAsFailure:
      totalMs: 250
- type: random-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: circuit-breaker
  - pluginRef: random-picker
`

// A slow endpoint (modelsim's extra latency) trips the breaker through
// latencyAsFailure, stays out while open, and recovers through half-open
// trials once it is fast again. Every request is answered.
func TestBreakerLatencyAsFailureTripsAndRecovers(t *testing.T) {
	sims, file := fleet(t, 2)
	s, _ := run(t, Config{EndpointsFile: file, ConfigText: breakerConfig})
	url, client := withGateway(t, s)
	h := healthOf(t, s, "sim-1")

	sims[1].sim().SetExtraLatency(600 * time.Millisecond)
	slowServed := 0
	waitUntil(t, 20*time.Second, "the breaker opens on the slow endpoint", func() bool {
		code, id := complete(t, client, url)
		require.Equal(t, http.StatusOK, code)
		if id == "sim-1" {
			slowServed++
		}
		return h.Breaker(time.Now()) == scheduling.BreakerOpen
	})
	require.Equal(t, 2, slowServed, "consecutiveFailures (2) slow responses open it")
	waitUntil(t, 2*time.Second, "the store takes it out", func() bool { return outOfRotation(s, "sim-1") == datastore.OutBreakerOpen })
	for h.Breaker(time.Now()) == scheduling.BreakerOpen {
		code, id := complete(t, client, url)
		require.Equal(t, http.StatusOK, code)
		if h.Breaker(time.Now()) == scheduling.BreakerOpen {
			require.Equal(t, "sim-0", id, "a request reached the endpoint while its breaker was open")
		}
	}

	sims[1].sim().SetExtraLatency(0)
	trials := 0
	waitUntil(t, 20*time.Second, "the breaker closes after successful trials", func() bool {
		code, id := complete(t, client, url)
		require.Equal(t, http.StatusOK, code)
		if id == "sim-1" {
			trials++
		}
		return h.Breaker(time.Now()) == scheduling.BreakerClosed
	})
	require.Equal(t, 2, trials, "successThreshold (2) trials close it")
	require.Equal(t, "", outOfRotation(s, "sim-1"))
	st := s.State()
	for _, e := range st.Endpoints {
		require.Equal(t, "closed", e.Breaker, e.Name)
		require.True(t, e.Routable, e.Name)
	}
}

// probeCounter is an endpoint that counts health probes by query.
type probeCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *probeCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.n[r.URL.RawQuery]++
	p.mu.Unlock()
}

func (p *probeCounter) count(q string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[q]
}

func hcConfig(query string) string {
	return fmt.Sprintf(`apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- {type: active-health-check, name: hc, parameters: {interval: 20ms, path: "/health?%s"}}
- type: random-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: random-picker}]
`, query)
}

// Runners start when their configuration serves (not before Run), keep
// running across a reload that keeps the instance, are replaced when a
// reload changes their parameters and stop when a reload drops them.
func TestRunnersFollowReloads(t *testing.T) {
	pc := &probeCounter{n: map[string]int{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: pc, ReadHeaderTimeout: time.Second}
	go func() { _ = hs.Serve(lis) }()
	defer hs.Close()
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf("endpoints:\n- {name: a, address: 127.0.0.1, port: %d}\n", lis.Addr().(*net.TCPAddr).Port)), 0o600))
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(hcConfig("a")), 0o600))

	// Built but not running: nothing probes (as in epp validate).
	idle, err := New(Config{EndpointsFile: file, ConfigFile: cfgFile, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, pc.count("a"), "a server that does not run probes nothing")
	require.Empty(t, idle.runners.names())
	idle.closeListeners()
	idle.gen.Load().loaded.Close()

	s, stop := run(t, Config{EndpointsFile: file, ConfigFile: cfgFile})
	waitUntil(t, 5*time.Second, "probing", func() bool { return pc.count("a") > 0 })
	first := s.gen.Load().loaded.Plugins["hc"]

	// Same parameters: the instance is kept and keeps running.
	writeAtomic(t, cfgFile, hcConfig("a")+"# touched\n")
	require.NoError(t, s.Reload())
	require.Same(t, first, s.gen.Load().loaded.Plugins["hc"])
	require.Equal(t, []string{"hc"}, s.runners.names())
	n := pc.count("a")
	waitUntil(t, 5*time.Second, "the kept instance keeps probing", func() bool { return pc.count("a") > n+2 })

	// New parameters: a new instance of the same name replaces it.
	writeAtomic(t, cfgFile, hcConfig("b"))
	require.NoError(t, s.Reload())
	waitUntil(t, 5*time.Second, "the new instance probes", func() bool { return pc.count("b") > 0 })
	time.Sleep(60 * time.Millisecond) // a probe of the old instance may have been in flight
	n = pc.count("a")
	time.Sleep(150 * time.Millisecond)
	require.Equal(t, n, pc.count("a"), "the replaced instance stopped")

	// Dropped: nothing probes.
	writeAtomic(t, cfgFile, strings.Replace(hcConfig("b"), "- {type: active-health-check, name: hc, parameters: {interval: 20ms, path: \"/health?b\"}}\n", "", 1))
	require.NoError(t, s.Reload())
	require.Empty(t, s.runners.names())
	time.Sleep(60 * time.Millisecond)
	n = pc.count("b")
	time.Sleep(150 * time.Millisecond)
	require.Equal(t, n, pc.count("b"), "the dropped instance stopped")
	stop()
}
