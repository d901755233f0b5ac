package scrape

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/metricssource"
)

const vllmBody = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} %d
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.5
`

// metricsServer is a model server's /metrics endpoint on loopback.
type metricsServer struct {
	*httptest.Server
	body     atomic.Pointer[string]
	status   atomic.Int32
	hang     atomic.Bool
	delay    atomic.Int64 // nanoseconds
	hits     atomic.Int64
	inFlight atomic.Int64
	maxSeen  atomic.Int64
	path     atomic.Pointer[string]
	// query and encoding are the last request's query and
	// Accept-Encoding header.
	query    atomic.Pointer[url.Values]
	encoding atomic.Pointer[string]
}

func newMetricsServer(t *testing.T, body string) *metricsServer {
	t.Helper()
	return startMetricsServer(t, body, false)
}

func startMetricsServer(t *testing.T, body string, tls bool) *metricsServer {
	t.Helper()
	ms := &metricsServer{}
	ms.setPath("/metrics")
	ms.body.Store(&body)
	ms.status.Store(http.StatusOK)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ms.hits.Add(1)
		q, enc := r.URL.Query(), r.Header.Get("Accept-Encoding")
		ms.query.Store(&q)
		ms.encoding.Store(&enc)
		n := ms.inFlight.Add(1)
		defer ms.inFlight.Add(-1)
		for {
			m := ms.maxSeen.Load()
			if n <= m || ms.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		if r.URL.Path != *ms.path.Load() {
			http.NotFound(w, r)
			return
		}
		if ms.hang.Load() {
			<-r.Context().Done()
			return
		}
		if d := time.Duration(ms.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(int(ms.status.Load()))
		_, _ = w.Write([]byte(*ms.body.Load()))
	})
	ms.Server = httptest.NewUnstartedServer(h)
	ms.Config.ErrorLog = log.New(io.Discard, "", 0) // expected TLS handshake failures
	if tls {
		ms.StartTLS()
	} else {
		ms.Start()
	}
	t.Cleanup(ms.Close)
	return ms
}

func (ms *metricsServer) setBody(b string) { ms.body.Store(&b) }

func (ms *metricsServer) setPath(p string) { ms.path.Store(&p) }

func (ms *metricsServer) hostPort(t *testing.T) (string, int) {
	t.Helper()
	u, err := url.Parse(ms.URL)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(u.Host)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return host, p
}

func (ms *metricsServer) spec(t *testing.T, name string) datastore.EndpointSpec {
	host, port := ms.hostPort(t)
	return datastore.EndpointSpec{Name: name, Address: host, Port: port}
}

// logSink collects log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, prefix+" "+args)
		l.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

func (l *logSink) count(substr ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
outer:
	for _, line := range l.lines {
		for _, s := range substr {
			if !strings.Contains(line, s) {
				continue outer
			}
		}
		n++
	}
	return n
}

type harness struct {
	store *datastore.Store
	sc    *Scraper
	reg   *prometheus.Registry
	logs  *logSink
	stop  func()
}

func defaultConfig(t testing.TB) Config {
	return Config{Source: metricssource.DefaultParams(), Extractor: extractor(t, coremetrics.DefaultParams())}
}

// start runs a scraper over a new store; threshold 0 means one hour, so
// that only scrape failures make endpoints stale.
func start(t *testing.T, threshold time.Duration, cfg Config, opts Options, specs ...datastore.EndpointSpec) *harness {
	t.Helper()
	if threshold == 0 {
		threshold = time.Hour
	}
	h := &harness{logs: &logSink{}, reg: prometheus.NewRegistry()}
	h.store = datastore.New(datastore.Options{StalenessThreshold: threshold})
	require.NoError(t, h.store.Replace(specs))
	if opts.Interval == 0 {
		opts.Interval = 10 * time.Millisecond
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 100 * time.Millisecond // quick recoveries
	}
	opts.Logger = h.logs.logger()
	opts.Registerer = h.reg
	var err error
	h.sc, err = NewScraper(h.store, cfg, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.sc.Run(ctx)
	}()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) ready() []string {
	var out []string
	sn := h.store.Snapshot()
	if sn.FailOpen() {
		return nil
	}
	for _, e := range sn.Ready() {
		out = append(out, e.Name())
	}
	return out
}

func (h *harness) errorsFor(reason string) float64 {
	return metricValue(h.sc.metrics.errors.WithLabelValues(reason))
}

// wait is generous: tests share loaded CI machines.
const wait = 15 * time.Second

// metricValue reads a counter's or gauge's value.
func metricValue(m prometheus.Metric) float64 {
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		panic(err)
	}
	if c := out.GetCounter(); c != nil {
		return c.GetValue()
	}
	return out.GetGauge().GetValue()
}

func TestScrapeReachesSnapshot(t *testing.T) {
	srv := newMetricsServer(t, fmt.Sprintf(vllmBody, 3))
	h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
	require.Eventually(t, func() bool {
		ep, ok := h.store.Snapshot().Lookup("a")
		return ok && ep.Metrics().WaitingQueueSize == 3 && len(h.ready()) == 1
	}, wait, time.Millisecond)
	ep, _ := h.store.Snapshot().Lookup("a")
	assert.Equal(t, 2, ep.Metrics().RunningRequestsSize)
	assert.Equal(t, 0.5, ep.Metrics().KVCacheUsagePercent)
	assert.False(t, ep.Metrics().UpdateTime.IsZero())
	eng, _ := datastore.EngineKey.Get(ep)
	assert.Equal(t, "vllm", eng)

	// A new value reaches the request path within a few intervals.
	srv.setBody(fmt.Sprintf(vllmBody, 9))
	changed := time.Now()
	require.Eventually(t, func() bool {
		ep, _ := h.store.Snapshot().Lookup("a")
		return ep.Metrics().WaitingQueueSize == 9
	}, wait, time.Millisecond)
	t.Logf("new metrics visible after %v (interval 10ms)", time.Since(changed))

	st, ok := h.store.ScrapeStatus("a")
	require.True(t, ok)
	assert.True(t, st.Fresh)
	assert.Equal(t, "vllm", st.Engine)
	assert.Contains(t, st.Warning, "vllm:lora_requests_info not found", "partial scrape: missing metrics are a warning")
	assert.Equal(t, 1, h.logs.count("Some metrics could not be read"), "the warning is logged once")
	assert.Zero(t, h.logs.count("Scraping metrics failed"))
	assert.Equal(t, 1.0, metricValue(h.sc.metrics.targets))
}

// TestClosedServerLeavesReady: an endpoint killed mid-test is stale at the
// next publish, long before the staleness threshold; its failure is logged
// once.
func TestClosedServerLeavesReady(t *testing.T) {
	a := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
	b := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
	h := start(t, 0, defaultConfig(t), Options{}, a.spec(t, "a"), b.spec(t, "b"))
	require.Eventually(t, func() bool { return len(h.ready()) == 2 }, wait, time.Millisecond)
	a.Close()
	killed := time.Now()
	require.Eventually(t, func() bool {
		r := h.ready()
		return len(r) == 1 && r[0] == "b"
	}, wait, time.Millisecond)
	t.Logf("killed endpoint left Ready after %v", time.Since(killed))
	time.Sleep(100 * time.Millisecond) // many more failed scrapes
	assert.Equal(t, []string{"b"}, h.ready())
	assert.Greater(t, h.errorsFor(ReasonConnect), 1.0)
	assert.Equal(t, 1, h.logs.count("Scraping metrics failed", `"endpoint"="a"`, `"reason"="connect"`))
	st, _ := h.store.ScrapeStatus("a")
	assert.False(t, st.Fresh)
	assert.Greater(t, st.ConsecutiveFailures, 1)
	assert.NotEmpty(t, st.LastError)
	require.Eventually(t, func() bool { return metricValue(h.sc.metrics.stale) == 1 }, wait, 10*time.Millisecond)
}

func TestFailureReasonsAndRecovery(t *testing.T) {
	tests := []struct {
		name   string
		opts   Options
		break_ func(*metricsServer)
		reason string
	}{
		{"http status", Options{}, func(s *metricsServer) { s.status.Store(http.StatusServiceUnavailable) }, ReasonHTTPStatus},
		{"hang", Options{Timeout: 300 * time.Millisecond}, func(s *metricsServer) { s.hang.Store(true) }, ReasonTimeout},
		{"slow", Options{Timeout: 300 * time.Millisecond}, func(s *metricsServer) { s.delay.Store(int64(10 * time.Second)) }, ReasonTimeout},
		{"garbage in a metric", Options{}, func(s *metricsServer) { s.setBody("vllm:num_requests_waiting{{{ 1\n") }, ReasonParse},
		{"not metrics", Options{}, func(s *metricsServer) { s.setBody("<html>hello</html>\n") }, ReasonMissingMetrics},
		{"body too large", Options{MaxBodyBytes: 1024}, func(s *metricsServer) {
			s.setBody(fmt.Sprintf(vllmBody, 1) + strings.Repeat("# padding\n", 200))
		}, ReasonBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
			b := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
			h := start(t, 0, defaultConfig(t), tt.opts, a.spec(t, "a"), b.spec(t, "b"))
			require.Eventually(t, func() bool { return len(h.ready()) == 2 }, wait, time.Millisecond)
			tt.break_(a)
			require.Eventually(t, func() bool {
				r := h.ready()
				return len(r) == 1 && r[0] == "b"
			}, wait, time.Millisecond)
			require.Eventually(t, func() bool { return h.errorsFor(tt.reason) >= 2 }, wait, time.Millisecond)
			for _, r := range reasons {
				// Timeouts of the healthy endpoint can happen on an
				// overloaded machine; other reasons cannot.
				if r != tt.reason && r != ReasonTimeout {
					assert.Zero(t, h.errorsFor(r), r)
				}
			}
			assert.Equal(t, 1, h.logs.count("Scraping metrics failed", `"endpoint"="a"`, `"reason"="`+tt.reason+`"`))
			if tt.reason == ReasonBodyTooLarge {
				st, _ := h.store.ScrapeStatus("a")
				assert.Contains(t, st.LastError, "metrics body exceeds 1024 bytes")
			}

			// Recovery.
			a.status.Store(http.StatusOK)
			a.hang.Store(false)
			a.delay.Store(0)
			a.setBody(fmt.Sprintf(vllmBody, 1))
			require.Eventually(t, func() bool { return len(h.ready()) == 2 }, wait, time.Millisecond)
			require.Eventually(t, func() bool { return h.logs.count("Scraping metrics recovered", `"endpoint"="a"`) == 1 }, wait, time.Millisecond)
		})
	}
}

func TestBodyExactlyAtLimit(t *testing.T) {
	body := fmt.Sprintf(vllmBody, 1)
	srv := newMetricsServer(t, body)
	h := start(t, 0, defaultConfig(t), Options{MaxBodyBytes: int64(len(body))}, srv.spec(t, "a"))
	require.Eventually(t, func() bool { return len(h.ready()) == 1 }, wait, time.Millisecond)
	assert.Zero(t, h.errorsFor(ReasonBodyTooLarge))
}

// TestHungEndpointSweep: with a timeout longer than the staleness
// threshold, the publisher's sweep makes a hung endpoint stale.
func TestHungEndpointSweep(t *testing.T) {
	a := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
	b := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
	h := start(t, 200*time.Millisecond, defaultConfig(t), Options{Timeout: time.Minute}, a.spec(t, "a"), b.spec(t, "b"))
	require.Eventually(t, func() bool { return len(h.ready()) == 2 }, wait, time.Millisecond)
	a.hang.Store(true)
	require.Eventually(t, func() bool {
		r := h.ready()
		return len(r) == 1 && r[0] == "b"
	}, wait, time.Millisecond)
	assert.Zero(t, h.errorsFor(ReasonTimeout), "no scrape finished")
	h.stop() // cancels the hung request
}

func TestRemovedEndpointStopsBeingScraped(t *testing.T) {
	a := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
	b := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
	h := start(t, 0, defaultConfig(t), Options{}, a.spec(t, "a"))
	require.Eventually(t, func() bool { return a.hits.Load() > 3 }, wait, time.Millisecond)

	require.NoError(t, h.store.Replace([]datastore.EndpointSpec{b.spec(t, "b")}))
	require.Eventually(t, func() bool { return b.hits.Load() > 0 }, wait, time.Millisecond, "new endpoint scraped")
	require.Eventually(t, func() bool { return len(h.ready()) == 1 && h.ready()[0] == "b" }, wait, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // let a scrape in flight finish
	before := a.hits.Load()
	time.Sleep(150 * time.Millisecond)
	assert.Equal(t, before, a.hits.Load(), "removed endpoint is not scraped")

	h.store.Delete("b")
	time.Sleep(50 * time.Millisecond)
	before = b.hits.Load()
	time.Sleep(150 * time.Millisecond)
	assert.Equal(t, before, b.hits.Load())
	assert.Equal(t, 0.0, metricValue(h.sc.metrics.targets))
}

func TestConcurrencyBound(t *testing.T) {
	var specs []datastore.EndpointSpec
	var servers []*metricsServer
	for i := range 6 {
		s := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
		s.delay.Store(int64(20 * time.Millisecond))
		servers = append(servers, s)
		specs = append(specs, s.spec(t, fmt.Sprintf("e%d", i)))
	}
	var total atomic.Int64
	var maxTotal atomic.Int64
	stopWatch := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			n := int64(0)
			for _, s := range servers {
				n += s.inFlight.Load()
			}
			total.Store(n)
			if n > maxTotal.Load() {
				maxTotal.Store(n)
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	h := start(t, 0, defaultConfig(t), Options{MaxConcurrency: 2}, specs...)
	require.Eventually(t, func() bool {
		for _, s := range servers {
			if s.hits.Load() < 3 {
				return false
			}
		}
		return true
	}, wait, time.Millisecond)
	close(stopWatch)
	wg.Wait()
	h.stop()
	assert.LessOrEqual(t, maxTotal.Load(), int64(2), "at most MaxConcurrency handlers at once")
	assert.Equal(t, int64(2), maxTotal.Load(), "the bound is reached")
}

func TestSetConfig(t *testing.T) {
	srv := newMetricsServer(t, fmt.Sprintf(vllmBody, 4))
	srv.setPath("/custom")
	cfg := defaultConfig(t)
	h := start(t, 0, cfg, Options{}, srv.spec(t, "a"))
	require.Eventually(t, func() bool { return h.errorsFor(ReasonHTTPStatus) > 0 }, wait, time.Millisecond, "404 on /metrics")
	assert.Empty(t, h.ready())

	cfg.Source.Path = "/custom"
	require.NoError(t, h.sc.SetConfig(cfg))
	require.Eventually(t, func() bool { return len(h.ready()) == 1 }, wait, time.Millisecond)

	// Data layer disabled: scraping stops, every endpoint is ready.
	require.NoError(t, h.sc.SetConfig(Config{}))
	time.Sleep(50 * time.Millisecond)
	before := srv.hits.Load()
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, before, srv.hits.Load())
	sn := h.store.Snapshot()
	assert.Len(t, sn.Ready(), 1)
	assert.False(t, sn.FailOpen())

	require.NoError(t, h.sc.SetConfig(cfg))
	require.Eventually(t, func() bool { return srv.hits.Load() > before }, wait, time.Millisecond)

	// An invalid source is refused and the old one kept.
	err := h.sc.SetConfig(Config{Source: metricssource.Params{Scheme: "ftp", Path: "/x"}, Extractor: cfg.Extractor})
	require.ErrorContains(t, err, `scheme: must be "http" or "https", got "ftp"`)
	hits := srv.hits.Load()
	require.Eventually(t, func() bool { return srv.hits.Load() > hits+2 }, wait, time.Millisecond)
	assert.Len(t, h.ready(), 1)
}

func TestEndpointMetricsPortPathAndEngine(t *testing.T) {
	sglang := `sglang:num_queue_reqs 6
sglang:num_running_reqs 1
sglang:token_usage 0.25
`
	srv := newMetricsServer(t, sglang)
	srv.setPath("/stats")
	host, port := srv.hostPort(t)
	x := extractor(t, coremetrics.Params{EngineLabelKey: "engine", DefaultEngine: "vllm"})
	specs := []datastore.EndpointSpec{
		// Serving port unused; metrics on the server's port and path.
		{Name: "by-spec", Address: host, Port: 1, MetricsPort: port, MetricsPath: "/stats", Engine: "sglang"},
		// Unknown spec engine: chosen from the label.
		{Name: "by-label", Address: host, Port: 2, MetricsPort: port, MetricsPath: "/stats", Engine: "nope", Labels: map[string]string{"engine": "sglang"}},
	}
	h := start(t, 0, Config{Source: metricssource.DefaultParams(), Extractor: x}, Options{}, specs...)
	require.Eventually(t, func() bool { return len(h.ready()) == 2 }, wait, time.Millisecond)
	for _, name := range []string{"by-spec", "by-label"} {
		ep, _ := h.store.Snapshot().Lookup(name)
		assert.Equal(t, 6, ep.Metrics().WaitingQueueSize, name)
		eng, _ := datastore.EngineKey.Get(ep)
		assert.Equal(t, "sglang", eng, name)
	}
	assert.Equal(t, 1, h.logs.count("Unknown engine", `"engine"="nope"`))
}

// TestNameFilter: each endpoint is asked for only the families its
// engine's mapping reads (name[] per family, sorted), without gzip; with
// nameFilter off the URL has no query. A server that ignores the filter
// (this one answers its whole body) is read as before.
func TestNameFilter(t *testing.T) {
	vllm := newMetricsServer(t, fmt.Sprintf(vllmBody, 3)+"# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 7\n")
	sglang := newMetricsServer(t, "sglang:num_queue_reqs 6\nsglang:num_running_reqs 1\nsglang:token_usage 0.25\n")
	sg := sglang.spec(t, "sg")
	sg.Engine = "sglang"
	cfg := defaultConfig(t)
	h := start(t, 0, cfg, Options{}, vllm.spec(t, "v"), sg)
	require.Eventually(t, func() bool { return len(h.ready()) == 2 }, wait, time.Millisecond)
	engines := cfg.Extractor.Engines()
	for _, c := range []struct {
		srv    *metricsServer
		engine string
	}{{vllm, "vllm"}, {sglang, "sglang"}} {
		m := engines[c.engine]
		q := *c.srv.query.Load()
		assert.Equal(t, WantedFamilies(&m), q[NameFilterParam], c.engine)
		assert.Len(t, q, 1, "only name[]")
		assert.Contains(t, q[NameFilterParam], c.engine+":"+map[string]string{"vllm": "num_requests_waiting", "sglang": "num_queue_reqs"}[c.engine])
		assert.Empty(t, *c.srv.encoding.Load(), "no transparent gzip")
	}
	ep, _ := h.store.Snapshot().Lookup("v")
	assert.Equal(t, 3, ep.Metrics().WaitingQueueSize)

	cfg.Source.NameFilter = false
	require.NoError(t, h.sc.SetConfig(cfg))
	require.Eventually(t, func() bool { return len(*vllm.query.Load()) == 0 && len(*sglang.query.Load()) == 0 }, wait, time.Millisecond)
	vllm.setBody(fmt.Sprintf(vllmBody, 8))
	require.Eventually(t, func() bool {
		ep, _ := h.store.Snapshot().Lookup("v")
		return ep.Metrics().WaitingQueueSize == 8
	}, wait, time.Millisecond)
}

func TestHTTPS(t *testing.T) {
	srv := startMetricsServer(t, fmt.Sprintf(vllmBody, 1), true)
	cfg := defaultConfig(t)
	cfg.Source.Scheme = "https"
	cfg.Source.InsecureSkipVerify = false
	h := start(t, 0, cfg, Options{}, srv.spec(t, "a"))
	require.Eventually(t, func() bool { return h.errorsFor(ReasonConnect) > 0 }, wait, time.Millisecond, "unverified certificate")
	assert.Empty(t, h.ready())
	cfg.Source.InsecureSkipVerify = true
	require.NoError(t, h.sc.SetConfig(cfg))
	require.Eventually(t, func() bool { return len(h.ready()) == 1 }, wait, time.Millisecond)
}

func TestNewScraperErrors(t *testing.T) {
	store := datastore.New(datastore.Options{})
	cfg := defaultConfig(t)
	for _, tt := range []struct {
		name  string
		store *datastore.Store
		cfg   Config
		opts  Options
		want  string
	}{
		{"nil store", nil, cfg, Options{}, "nil store"},
		{"interval", store, cfg, Options{Interval: -1}, "interval must be positive"},
		{"timeout", store, cfg, Options{Timeout: -1}, "timeout must be positive"},
		{"body", store, cfg, Options{MaxBodyBytes: -1}, "max body bytes"},
		{"concurrency", store, cfg, Options{MaxConcurrency: -1}, "max concurrency"},
		{"backoff", store, cfg, Options{MaxBackoff: -1}, "max backoff must be positive"},
		{"round", store, cfg, Options{RoundSize: -1}, "round size must be positive"},
		{"source", store, Config{Source: metricssource.Params{Scheme: "http", Path: "nope"}}, Options{}, `path: must start with "/"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewScraper(tt.store, tt.cfg, tt.opts)
			require.ErrorContains(t, err, tt.want)
		})
	}
	// Defaults, and enabling freshness tracking in the store.
	sc, err := NewScraper(store, Config{Extractor: cfg.Extractor}, Options{})
	require.NoError(t, err)
	assert.Equal(t, DefaultInterval, sc.opts.Interval)
	assert.Equal(t, DefaultTimeout, sc.opts.Timeout)
	assert.Equal(t, int64(DefaultMaxBodyBytes), sc.opts.MaxBodyBytes)
	assert.Equal(t, DefaultMaxConcurrency, sc.opts.MaxConcurrency)
	assert.Equal(t, DefaultMaxBackoff, sc.opts.MaxBackoff)
	assert.Equal(t, DefaultRoundSize, sc.opts.RoundSize)
	sc2, err := NewScraper(datastore.New(datastore.Options{}), Config{Extractor: cfg.Extractor}, Options{Interval: time.Second, MaxBackoff: time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, time.Second, sc2.opts.MaxBackoff, "at least one interval")
	assert.Equal(t, 10*time.Millisecond, sc.publishGap())
	require.NoError(t, store.Replace([]datastore.EndpointSpec{{Name: "a", Address: "127.0.0.1", Port: 1}}))
	assert.True(t, store.Snapshot().FailOpen(), "freshness tracked, nothing scraped yet")
}

func TestRunTwice(t *testing.T) {
	h := start(t, 0, defaultConfig(t), Options{})
	require.Eventually(t, h.sc.running.Load, wait, time.Millisecond)
	done := make(chan struct{})
	go func() {
		h.sc.Run(context.Background())
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("second Run did not return")
	}
	assert.Equal(t, 1, h.logs.count("Scraper.Run called twice"))
}

func TestMetricsLint(t *testing.T) {
	srv := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
	h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
	require.Eventually(t, func() bool { return len(h.ready()) == 1 }, wait, time.Millisecond)
	// A second scraper on the same registry reuses the collectors.
	_, err := NewScraper(h.store, defaultConfig(t), Options{Registerer: h.reg})
	require.NoError(t, err)
	families, err := h.reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	assert.ElementsMatch(t, []string{
		"switchyard_scrape_errors_total", "switchyard_scrape_invalid_values_total", "switchyard_scrape_duration_seconds",
		"switchyard_endpoints_stale", "switchyard_endpoints_load_unknown", "switchyard_scrape_targets",
	}, names)
	for _, f := range families {
		if f.GetName() == "switchyard_scrape_invalid_values_total" {
			var labels []string
			for _, m := range f.GetMetric() {
				require.Len(t, m.GetLabel(), 1)
				assert.Equal(t, "metric", m.GetLabel()[0].GetName())
				labels = append(labels, m.GetLabel()[0].GetValue())
			}
			assert.ElementsMatch(t, []string{"queue", "running", "kv_cache"}, labels, "a closed set, every value present from the start")
		}
	}
	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", errBodyTooLarge), ReasonBodyTooLarge},
		{&statusError{code: 500}, ReasonHTTPStatus},
		{context.DeadlineExceeded, ReasonTimeout},
		{fmt.Errorf("%w: x", ErrNoMetrics), ReasonMissingMetrics},
		{fmt.Errorf("%w: x", ErrMalformed), ReasonParse},
		{os.ErrNotExist, ReasonConnect},
		{fmt.Errorf("read metrics: %w", gzip.ErrChecksum), ReasonParse},
		{fmt.Errorf("read gzip body: %w", os.ErrDeadlineExceeded), ReasonTimeout},
	} {
		assert.Equal(t, tt.want, classify(tt.err), "%v", tt.err)
	}
	assert.Equal(t, "unexpected HTTP status 503 Service Unavailable", (&statusError{code: 503}).Error())
	assert.Equal(t, "unexpected HTTP status 302 Found: why", (&statusError{code: 302, detail: "why"}).Error())
}

// vllmLoad is a vLLM /metrics body with these load values (as written in
// the text format); an empty value leaves the family out.
func vllmLoad(queue, running, kv string) string {
	var b strings.Builder
	for _, l := range []struct{ name, v string }{
		{"vllm:num_requests_waiting", queue}, {"vllm:num_requests_running", running}, {"vllm:kv_cache_usage_perc", kv},
	} {
		if l.v != "" {
			fmt.Fprintf(&b, "# TYPE %s gauge\n%s{model_name=\"m\"} %s\n", l.name, l.name, l.v)
		}
	}
	b.WriteString("# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1\n")
	return b.String()
}

// brokenEndpoints are model servers whose load metrics cannot be read,
// with the reason the scraper must report.
var brokenEndpoints = []struct {
	name, body, reason, metric string
}{
	{"nan-queue", vllmLoad("NaN", "1", "0.5"), "vllm:num_requests_waiting is NaN", LoadQueue},
	{"inf-running", vllmLoad("0", "+Inf", "0.5"), "vllm:num_requests_running is +Inf", LoadRunning},
	{"neginf-kv", vllmLoad("0", "1", "-Inf"), "vllm:kv_cache_usage_perc is -Inf", LoadKVCache},
	{"negative-queue", vllmLoad("-5", "1", "0.5"), "vllm:num_requests_waiting is negative (-5)", LoadQueue},
	{"negative-running", vllmLoad("0", "-1", "0.5"), "vllm:num_requests_running is negative (-1)", LoadRunning},
	{"negative-kv", vllmLoad("0", "1", "-0.25"), "vllm:kv_cache_usage_perc is negative (-0.25)", LoadKVCache},
	{"absent-queue", vllmLoad("", "0", "0"), "vllm:num_requests_waiting is absent", LoadQueue},
}

// TestLoadUnknownLeavesReady: model servers whose metrics answer but whose
// load cannot be read (NaN, ±Inf, negative, absent) are not in Ready while
// a healthy one is, their status says why, the invalid values are counted
// and each transition is logged once.
func TestLoadUnknownLeavesReady(t *testing.T) {
	healthy := newMetricsServer(t, vllmLoad("3", "2", "0.5"))
	specs := []datastore.EndpointSpec{healthy.spec(t, "healthy")}
	servers := map[string]*metricsServer{}
	for _, b := range brokenEndpoints {
		srv := newMetricsServer(t, b.body)
		servers[b.name] = srv
		specs = append(specs, srv.spec(t, b.name))
	}
	h := start(t, 0, defaultConfig(t), Options{}, specs...)
	require.Eventually(t, func() bool {
		for _, b := range brokenEndpoints {
			if st, _ := h.store.ScrapeStatus(b.name); st.LoadUnknown == "" {
				return false
			}
		}
		return len(h.ready()) == 1
	}, wait, time.Millisecond)
	assert.Equal(t, []string{"healthy"}, h.ready())
	time.Sleep(100 * time.Millisecond) // more scrapes, more publishes
	sn := h.store.Snapshot()
	assert.Equal(t, []string{"healthy"}, h.ready(), "still only the healthy endpoint")
	assert.Equal(t, len(brokenEndpoints), sn.LoadUnknownCount())
	perMetric := map[string]int{}
	for _, b := range brokenEndpoints {
		perMetric[b.metric]++
		st, ok := h.store.ScrapeStatus(b.name)
		require.True(t, ok)
		assert.Equal(t, b.reason, st.LoadUnknown, b.name)
		assert.Empty(t, st.LastError, b.name)
		assert.False(t, st.Fresh, b.name)
		assert.Positive(t, st.ConsecutiveFailures, b.name)
		ep, _ := sn.Lookup(b.name)
		assert.True(t, sn.Stale(ep), b.name)
		assert.True(t, ep.Metrics().UpdateTime.IsZero(), "%s: no metrics of a bad scrape are published", b.name)
		assert.Equal(t, 1, h.logs.count("load cannot be read", `"endpoint"="`+b.name+`"`), b.name)
	}
	for metric, n := range perMetric {
		assert.GreaterOrEqual(t, metricValue(h.sc.metrics.invalid.WithLabelValues(metric)), float64(n), metric)
	}
	for _, r := range reasons {
		if r != ReasonTimeout {
			assert.Zero(t, h.errorsFor(r), "a load-unknown scrape is not a scrape error: %s", r)
		}
	}
	require.Eventually(t, func() bool { return metricValue(h.sc.metrics.loadUnknown) == float64(len(brokenEndpoints)) }, wait, 10*time.Millisecond)
	st, _ := h.store.ScrapeStatus("healthy")
	assert.True(t, st.Fresh)
	assert.Empty(t, st.LoadUnknown)

	// Every endpoint unknown: the pool fails open, as when every scrape fails.
	healthy.setBody(vllmLoad("NaN", "2", "0.5"))
	require.Eventually(t, func() bool { return h.store.Snapshot().FailOpen() }, wait, time.Millisecond)
	assert.Len(t, h.store.Snapshot().Ready(), len(specs))
	ep, _ := h.store.Snapshot().Lookup("healthy")
	assert.Equal(t, 3, ep.Metrics().WaitingQueueSize, "the last good metrics stay; the bad scrape's zeros are not published")

	// Recovery, logged once.
	healthy.setBody(vllmLoad("3", "2", "0.5"))
	servers["nan-queue"].setBody(vllmLoad("1", "1", "0.5"))
	require.Eventually(t, func() bool {
		r := h.ready()
		return len(r) == 2 && r[0] == "healthy" && r[1] == "nan-queue"
	}, wait, time.Millisecond)
	require.Eventually(t, func() bool {
		return h.logs.count("load can be read again", `"endpoint"="nan-queue"`) == 1 &&
			h.logs.count("load can be read again", `"endpoint"="healthy"`) == 1
	}, wait, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, 1, h.logs.count("load can be read again", `"endpoint"="nan-queue"`))
	assert.Equal(t, 1, h.logs.count("load cannot be read", `"endpoint"="healthy"`))
	st, _ = h.store.ScrapeStatus("nan-queue")
	assert.Empty(t, st.LoadUnknown)
	require.Eventually(t, func() bool { return metricValue(h.sc.metrics.loadUnknown) == float64(len(brokenEndpoints)-1) }, wait, 10*time.Millisecond)
}

// TestLoadUnknownReasonChange: a new kind of problem is logged at V(1); the
// same problem with another value is not logged again.
func TestLoadUnknownReasonChange(t *testing.T) {
	srv := newMetricsServer(t, vllmLoad("-1", "1", "0.5"))
	h := start(t, 0, defaultConfig(t), Options{MaxBackoff: 10 * time.Millisecond}, srv.spec(t, "a"))
	hits := func(n int64) func() bool {
		start := srv.hits.Load()
		return func() bool { return srv.hits.Load() >= start+n }
	}
	require.Eventually(t, hits(2), wait, time.Millisecond)
	srv.setBody(vllmLoad("-2", "1", "0.5"))
	require.Eventually(t, hits(3), wait, time.Millisecond)
	assert.Zero(t, h.logs.count("still cannot be read"))
	srv.setBody(vllmLoad("NaN", "1", "0.5"))
	require.Eventually(t, func() bool { return h.logs.count("still cannot be read", "is NaN") == 1 }, wait, time.Millisecond)
	assert.Equal(t, 1, h.logs.count("load cannot be read"))
	// From unknown to failing and back: each transition is logged.
	srv.status.Store(http.StatusInternalServerError)
	require.Eventually(t, func() bool { return h.logs.count("Scraping metrics failed") == 1 }, wait, time.Millisecond)
	srv.status.Store(http.StatusOK)
	require.Eventually(t, func() bool { return h.logs.count("load cannot be read") == 2 }, wait, time.Millisecond)
}

func TestBackoffDelay(t *testing.T) {
	const iv, maxB = 50 * time.Millisecond, 5 * time.Second
	none := func(time.Duration) time.Duration { return 0 }
	most := func(n time.Duration) time.Duration { return n - 1 }
	for _, tt := range []struct {
		failures int
		want     time.Duration
	}{
		{0, iv}, {1, iv}, {2, 2 * iv}, {3, 4 * iv}, {7, 64 * iv}, {8, maxB}, {1000, maxB},
	} {
		assert.Equal(t, tt.want, backoffDelay(iv, maxB, tt.failures, none), "failures=%d", tt.failures)
		got := backoffDelay(iv, maxB, tt.failures, most)
		assert.True(t, got > tt.want*3/4-time.Nanosecond && got <= tt.want, "failures=%d: jitter of at most a quarter, got %v", tt.failures, got)
	}
	assert.Equal(t, iv, backoffDelay(iv, iv, 10, none), "MaxBackoff = Interval: no back-off")
	assert.Equal(t, time.Duration(math.MaxInt64), backoffDelay(time.Second, math.MaxInt64, 100, none), "no overflow")
	for range 1000 {
		d := backoffDelay(iv, maxB, 30, rand.N[time.Duration])
		require.True(t, d > maxB*3/4 && d <= maxB, "%v", d)
	}
}

// hitLog records when a metrics server was hit.
type hitLog struct {
	mu    sync.Mutex
	times []time.Time
}

func (l *hitLog) add() {
	l.mu.Lock()
	l.times = append(l.times, time.Now())
	l.mu.Unlock()
}

func (l *hitLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.times)
}

// firstAfter returns the first hit after t (zero if none).
func (l *hitLog) firstAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.times {
		if h.After(t) {
			return h
		}
	}
	return time.Time{}
}

// countingServer is a model server on 127.0.0.1 that counts and times its
// hits and answers with a 500 or with good metrics.
func countingServer(t *testing.T) (*httptest.Server, *hitLog, *atomic.Bool) {
	t.Helper()
	hits := &hitLog{}
	good := &atomic.Bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.add()
		if !good.Load() {
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, vllmLoad("1", "1", "0.5"))
	}))
	t.Cleanup(srv.Close)
	return srv, hits, good
}

func specOf(t testing.TB, srv *httptest.Server, name string) datastore.EndpointSpec {
	t.Helper()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(u.Host)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return datastore.EndpointSpec{Name: name, Address: host, Port: p}
}

// TestBackoff: a failing endpoint is scraped far less often than once per
// interval, and is routed to again within MaxBackoff + Interval after it
// answers well; then it is scraped every interval again.
func TestBackoff(t *testing.T) {
	const interval, maxBackoff = 10 * time.Millisecond, 200 * time.Millisecond
	failing, hits, good := countingServer(t)
	healthy, healthyHits, healthyGood := countingServer(t)
	healthyGood.Store(true)
	h := start(t, 0, defaultConfig(t), Options{Interval: interval, MaxBackoff: maxBackoff},
		specOf(t, failing, "failing"), specOf(t, healthy, "healthy"))

	const window = 1500 * time.Millisecond
	time.Sleep(window)
	n := hits.count()
	hn := healthyHits.count()
	t.Logf("in %v: failing endpoint hit %d times, healthy one %d times (one per interval: %d)", window, n, hn, window/interval)
	// 10, 20, 40, 80, 160 ms, then 200 ms (less jitter): about 12 hits.
	assert.LessOrEqual(t, n, 20, "backs off")
	assert.GreaterOrEqual(t, n, 6, "keeps trying")
	assert.Greater(t, hn, 3*n, "the healthy endpoint is scraped every interval")
	st, _ := h.store.ScrapeStatus("failing")
	assert.GreaterOrEqual(t, st.ConsecutiveFailures, 6)

	fixed := time.Now()
	good.Store(true)
	require.Eventually(t, func() bool { return len(h.ready()) == 2 }, wait, time.Millisecond)
	recovered := time.Since(fixed)
	first := hits.firstAfter(fixed).Sub(fixed)
	t.Logf("first scrape %v after the fix, ready after %v (MaxBackoff %v + Interval %v)", first, recovered, maxBackoff, interval)
	// The margin covers scheduling on a loaded machine.
	const margin = 150 * time.Millisecond
	assert.LessOrEqual(t, first, maxBackoff+margin)
	assert.LessOrEqual(t, recovered, maxBackoff+interval+margin)

	// Back to one scrape per interval.
	before := hits.count()
	time.Sleep(300 * time.Millisecond)
	assert.Greater(t, hits.count()-before, 10, "scraped every interval again")
}

// TestBackoffEndsOnConfigChange: a configuration change (SetConfig) ends
// the back-off, so that a fix by configuration takes effect within an
// interval rather than after the back-off.
func TestBackoffEndsOnConfigChange(t *testing.T) {
	const interval, maxBackoff = 10 * time.Millisecond, 10 * time.Second
	srv, hits, good := countingServer(t)
	cfg := defaultConfig(t)
	h := start(t, 0, cfg, Options{Interval: interval, MaxBackoff: maxBackoff}, specOf(t, srv, "a"))
	// 9 failures: the next wait is at least 10 ms × 2^8 × 3/4 ≈ 1.9 s.
	require.Eventually(t, func() bool { st, _ := h.store.ScrapeStatus("a"); return st.ConsecutiveFailures >= 9 }, wait, time.Millisecond)
	good.Store(true)
	changed := time.Now()
	require.NoError(t, h.sc.SetConfig(cfg))
	require.Eventually(t, func() bool { return len(h.ready()) == 1 }, wait, time.Millisecond)
	t.Logf("ready %v after the configuration change, first scrape after %v", time.Since(changed), hits.firstAfter(changed).Sub(changed))
	assert.Less(t, time.Since(changed), time.Second, "not after the back-off")
}
