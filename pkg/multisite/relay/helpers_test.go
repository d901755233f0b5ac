package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/switchyard-ai/switchyard/pkg/metrics"
	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fake clock's start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testEnv holds a test CA and a directory for certificate files.
type testEnv struct {
	t      *testing.T
	ca     *tlstest.CA
	caFile string
	dir    string
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	e := &testEnv{t: t, ca: tlstest.NewCA(t, "grid"), dir: t.TempDir()}
	e.caFile = e.ca.WriteFile(t, e.dir)
	return e
}

// testSite is one site: its loopback address, the relay's certificate
// files and its EPP's client certificate.
type testSite struct {
	name     string
	ip       string
	port     string // reserved signals port
	leaf     *tlstest.Leaf
	epp      *tlstest.Leaf
	certFile string
	keyFile  string
}

// site makes a site on ip (127.x.y.z) with a reserved signals port.
func (e *testEnv) site(name, ip string) *testSite {
	e.t.Helper()
	s := &testSite{name: name, ip: ip, leaf: e.ca.SiteLeaf(e.t, name, ip), epp: e.ca.Issue(e.t, tlsutil.SiteSPIFFEID(tlstest.TrustDomain, name)+"/epp")}
	dir := filepath.Join(e.dir, name)
	require.NoError(e.t, os.MkdirAll(dir, 0o755))
	s.certFile, s.keyFile = s.leaf.WriteFiles(e.t, dir)
	s.port = reservePort(e.t, ip)
	return s
}

func (s *testSite) addr() string { return net.JoinHostPort(s.ip, s.port) }

// reservePort returns a port free on ip (each site has its own address,
// so the short window before the relay binds it is harmless).
func reservePort(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	require.NoError(t, l.Close())
	return port
}

// config is a defaulted configuration of s with one provider scraping
// eppURL ("" for none) and the given peers.
func (e *testEnv) config(s *testSite, eppURL string, peers ...*testSite) *Config {
	e.t.Helper()
	cfg := &Config{
		Site: s.name, Cluster: "cluster-" + s.name, TrustDomain: tlstest.TrustDomain,
		ListenAddress: s.addr(), AdminAddress: s.ip + ":0",
		TLS:       TLSFiles{CertFile: s.certFile, KeyFile: s.keyFile, CAFile: e.caFile},
		Providers: []Provider{{Name: "pool"}},
	}
	if eppURL != "" {
		cfg.Providers[0].MetricsConfig = &MetricsConfig{Endpoint: eppURL}
	}
	for _, p := range peers {
		cfg.Peers = append(cfg.Peers, Peer{Site: p.name, Address: p.addr()})
	}
	cfg.SetDefaults()
	_, err := cfg.Validate()
	require.NoError(e.t, err)
	return cfg
}

// newRelay builds a relay (not started) with its own registry.
func newRelay(t *testing.T, cfg *Config, clock Clock) (*Relay, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := Options{Logger: testr.NewWithOptions(t, testr.Options{Verbosity: 1}), Registry: reg}
	if clock != nil {
		opts.Clock = clock
	}
	r, err := New(cfg, opts)
	require.NoError(t, err)
	require.NoError(t, r.Listen())
	return r, reg
}

// start runs r (Run, or Serve without loops) until the test ends.
func start(t *testing.T, r *Relay, loops bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		if loops {
			done <- r.Run(ctx)
		} else {
			done <- r.Serve(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("relay stopped: %v", err)
	}
}

// client returns an HTTP client presenting leaf and verifying that the
// server is want.
func (e *testEnv) client(leaf *tlstest.Leaf, want tlsutil.Identity) (*http.Client, func()) {
	cfg := tlsutil.ClientConfig("localhost", func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf.TLS, nil },
		tlsutil.VerifyPeer([]tlsutil.Identity{want}, e.ca.Pool, x509.ExtKeyUsageServerAuth))
	tr := &http.Transport{TLSClientConfig: cfg}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, tr.CloseIdleConnections
}

// fetch GETs r's signals as leaf and parses the body against its Date.
func (e *testEnv) fetch(r *Relay, s *testSite, leaf *tlstest.Leaf) (signals.Result, *http.Response) {
	e.t.Helper()
	c, closeIdle := e.client(leaf, s.leaf.Identity())
	defer closeIdle()
	resp, err := c.Get("https://" + r.SignalsAddr() + signals.Path)
	require.NoError(e.t, err)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Logf("status %d: %s", resp.StatusCode, b)
		return signals.Result{}, resp
	}
	date, err := http.ParseTime(resp.Header.Get("Date"))
	require.NoError(e.t, err)
	res, err := signals.Parse(resp.Body, signals.ParseOptions{Date: date})
	require.NoError(e.t, err)
	require.Nil(e.t, res.Dropped, "the relay served rows its EPP refuses: %v", res.FirstParseError)
	return res, resp
}

// stubEPP is an EPP's metrics port served from a real metrics.Metrics
// registry on ip; mode 1 answers 500, mode 2 closes connections.
type stubEPP struct {
	m    *metrics.Metrics
	url  string
	mode atomic.Int32
	hits atomic.Int64
}

func newStubEPP(t *testing.T, ip, pool string) *stubEPP {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, pool)
	require.NoError(t, err)
	m.SetInfo("abc123", "v1")
	s := &stubEPP{m: m}
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.hits.Add(1)
		switch s.mode.Load() {
		case 1:
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		case 2:
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			_ = c.Close()
			return
		}
		metricsHandler.ServeHTTP(w, req)
	}))
	l, err := net.Listen("tcp", ip+":0")
	require.NoError(t, err)
	srv.Listener = l
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/metrics"
	return s
}

// load sets the pool gauges: n ready endpoints each with queue and
// running requests and KV usage kv.
func (s *stubEPP) load(n, queue, running int, kv float64) {
	samples := make([]metrics.PoolSample, n)
	for i := range samples {
		samples[i] = metrics.PoolSample{Name: "pod-" + string(rune('a'+i)), Ready: true, Queue: queue, Running: running, KVUsage: kv}
	}
	s.m.UpdatePool(samples)
}

// rowsOf returns the rows of site (and provider, "" for any), keyed
// "name/provider".
func rowsOf(res signals.Result, site string) map[string]signals.Sample {
	out := map[string]signals.Sample{}
	for _, s := range res.Samples {
		if s.Site == site {
			out[s.Name+"/"+s.Provider] = s
		}
	}
	return out
}

func sitesOf(res signals.Result) []string {
	seen := map[string]bool{}
	for _, s := range res.Samples {
		seen[s.Site] = true
	}
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// metricValue reads a counter or gauge with the given labels from reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k {
			return l.GetValue() == v
		}
	}
	return false
}

// peerServer serves crafted signals bodies over mutual TLS as leaf on ip,
// accepting any client certificate of the CA.
func (e *testEnv) peerServer(ip string, leaf *tlstest.Leaf, h http.HandlerFunc) string {
	e.t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	require.NoError(e.t, err)
	srv := &http.Server{Handler: h, TLSConfig: tlsutil.MutualServerConfig(tlsutil.Static(leaf.TLS), nil), ReadHeaderTimeout: time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ServeTLS(l, "", "") })
	e.t.Cleanup(func() {
		_ = srv.Close()
		wg.Wait()
	})
	return l.Addr().String()
}

// body encodes rows as a peer would.
func body(t *testing.T, rows []signals.Sample) string {
	t.Helper()
	var b strings.Builder
	_, err := signals.Encode(&b, rows, nil, signals.Limits{MaxBytes: 64 << 20, MaxLinesPerTarget: 1 << 20})
	require.NoError(t, err)
	return b.String()
}
