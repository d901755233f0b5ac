package relay

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

// TestG01_ScrapeIntervalDefaultEnvAndLoop: the scrape interval defaults to
// 1 s, GRID_SIGNALS_SCRAPE_INTERVAL_SECS overrides the file, a bad value
// fails, and Run scrapes the EPP at that interval.
func TestG01_ScrapeIntervalDefaultEnvAndLoop(t *testing.T) {
	cfg, err := Decode([]byte("site: a\ncluster: c\nproviders: [{name: p}]\n"))
	require.NoError(t, err)
	cfg.SetDefaults()
	assert.Equal(t, time.Second, cfg.ScrapeInterval)
	assert.Equal(t, 2*time.Second, cfg.PeerPollInterval)
	assert.Equal(t, 2*time.Second, cfg.ConnectTimeout)
	assert.Equal(t, 2*time.Second, cfg.RequestTimeout)

	cfg, err = Decode([]byte("site: a\ncluster: c\nscrapeInterval: 5s\nproviders: [{name: p}]\n"))
	require.NoError(t, err)
	env := map[string]string{ScrapeIntervalEnv: "0.25"}
	require.NoError(t, cfg.ApplyEnv(func(k string) string { return env[k] }))
	assert.Equal(t, 250*time.Millisecond, cfg.ScrapeInterval, "the environment wins over the file")
	for _, bad := range []string{"0", "-1", "x", "NaN", "1e9"} {
		env[ScrapeIntervalEnv] = bad
		err := cfg.ApplyEnv(func(k string) string { return env[k] })
		assert.ErrorContains(t, err, ScrapeIntervalEnv, bad)
	}
	env[ScrapeIntervalEnv] = ""
	require.NoError(t, cfg.ApplyEnv(func(k string) string { return env[k] }))

	// Run scrapes every interval (real time: 50 ms).
	e := newEnv(t)
	a := e.site("a", "127.0.1.1")
	epp := newStubEPP(t, "127.0.1.1", "pool")
	c := e.config(a, epp.url)
	c.ScrapeInterval, c.ScrapeTimeout = 50*time.Millisecond, 50*time.Millisecond
	r, _ := newRelay(t, c, nil)
	start(t, r, true)
	begin := time.Now()
	require.Eventually(t, func() bool { return epp.hits.Load() >= 6 }, 3*time.Second, 5*time.Millisecond)
	elapsed := time.Since(begin)
	assert.GreaterOrEqual(t, elapsed, 5*50*time.Millisecond-20*time.Millisecond, "six scrapes, the first at once, take five intervals")
}

// TestG05_FiveSeriesAtOneInstant: the five pool series come from one
// scrape of a real pkg/metrics registry and carry one stamp, the instant
// the response arrived.
func TestG05_FiveSeriesAtOneInstant(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.2.1")
	epp := newStubEPP(t, "127.0.2.1", "pool")
	epp.load(3, 2, 4, 0.5)
	epp.m.FlowControlQueueSize(7)
	clock := newFakeClock()
	r, _ := newRelay(t, e.config(a, epp.url), clock)
	start(t, r, false)
	r.ScrapeOnce(context.Background())
	clock.Add(300 * time.Millisecond)

	res, resp := e.fetch(r, a, a.epp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rows := rowsOf(res, "a")
	want := map[string]float64{
		signals.NameAverageRunning: 4, signals.NameAverageQueue: 2, signals.NameReadyEndpoints: 3,
		signals.NameFlowControlQueue: 7, signals.NameAverageKVCache: 0.5,
	}
	for name, v := range want {
		s, ok := rows[name+"/pool"]
		require.True(t, ok, name)
		assert.Equal(t, v, s.Value, name)
		assert.True(t, s.Stamp.Equal(t0), "%s stamped %v, not the read instant", name, s.Stamp)
		assert.Equal(t, "cluster-a", s.Cluster)
	}
}

// TestParseEPPMetrics covers the label rules of the five series: the name
// label selects the provider, flow control sums the inference_pool series,
// bad values are not read, unrelated malformed lines do no harm.
func TestParseEPPMetrics(t *testing.T) {
	text := `# TYPE llm_d_epp_average_running_requests gauge
llm_d_epp_average_running_requests{name="p1"} 3
llm_d_epp_average_running_requests{name="p2"} NaN
llm_d_epp_average_queue_size{name="p1"} 1
llm_d_epp_average_queue_size{name="p2"} -1
llm_d_epp_ready_endpoints{name="p1"} 2
llm_d_epp_ready_endpoints{name="p2"} 1
llm_d_epp_flow_control_queue_size{fairness_id="a",priority="0",inference_pool="p1",model="m"} 2
llm_d_epp_flow_control_queue_size{fairness_id="b",priority="1",inference_pool="p1",model="m"} 3
llm_d_epp_flow_control_queue_size{fairness_id="a",priority="0",inference_pool="p2",model="m"} 1
llm_d_epp_average_kv_cache_utilization{name="p1"} 0.25
inference_extension_info{commit="c",build_ref="r"} 1
some_other_family{{{ garbage
`
	got, unattributed, result, err := parseEPPMetrics(strings.NewReader(text), []string{"p1", "p2", "p3"})
	require.NoError(t, err, result)
	assert.Zero(t, unattributed)
	require.Contains(t, got, "p1")
	assert.True(t, got["p1"].qualified())
	assert.Equal(t, [5]float64{3, 1, 2, 5, 0.25}, got["p1"].values)
	assert.Equal(t, "build_ref=r,commit=c", got["p1"].info)
	require.Contains(t, got, "p2")
	assert.False(t, got["p2"].qualified())
	assert.Equal(t, []string{signals.NameAverageRunning, signals.NameAverageQueue, signals.NameAverageKVCache}, got["p2"].missing())
	assert.NotContains(t, got, "p3")

	// A family of one unlabelled series is the provider's when the
	// endpoint serves one provider.
	got, _, _, err = parseEPPMetrics(strings.NewReader("llm_d_epp_ready_endpoints 4\n"), []string{"p"})
	require.NoError(t, err)
	assert.Equal(t, 4.0, got["p"].values[2])

	_, _, result, err = parseEPPMetrics(strings.NewReader("llm_d_epp_ready_endpoints{name=\"p\" 4\n"), []string{"p"})
	assert.Error(t, err)
	assert.Equal(t, ScrapeMalformed, result)
	_, _, result, err = parseEPPMetrics(io.LimitReader(zeros{}, MaxMetricsBytes+10), []string{"p"})
	assert.ErrorIs(t, err, errTooLarge)
	assert.Equal(t, ScrapeTooLarge, result)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '#'
	}
	return len(p), nil
}

// textEPP serves the metrics text body() returns, on ip.
func textEPP(t *testing.T, ip string, body func() string) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body())
	}))
	l, err := net.Listen("tcp", ip+":0")
	require.NoError(t, err)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func poolText(info string, withFlow bool) string {
	s := `llm_d_epp_average_running_requests{name="pool"} 1
llm_d_epp_average_queue_size{name="pool"} 0
llm_d_epp_ready_endpoints{name="pool"} 2
llm_d_epp_average_kv_cache_utilization{name="pool"} 0.1
`
	if withFlow {
		s += "llm_d_epp_flow_control_queue_size{inference_pool=\"pool\"} 0\n"
	}
	if info != "" {
		s += "inference_extension_info{commit=\"" + info + "\",build_ref=\"x\"} 1\n"
	}
	return s
}

// TestParseEPPMetricsUnlabelledSeveralProviders: on an endpoint serving
// several providers an unlabelled series (no name label; for flow control
// no inference_pool label) belongs to none of them: it is not read for
// any and counted; the labelled series still are. With one provider the
// same body is read as that provider's.
func TestParseEPPMetricsUnlabelledSeveralProviders(t *testing.T) {
	text := `llm_d_epp_average_running_requests 3
llm_d_epp_average_queue_size 1
llm_d_epp_ready_endpoints{name="p1"} 2
llm_d_epp_ready_endpoints{name="p2"} 5
llm_d_epp_flow_control_queue_size{fairness_id="a",priority="0"} 2
llm_d_epp_flow_control_queue_size{fairness_id="b",priority="0"} 4
llm_d_epp_average_kv_cache_utilization 0.5
`
	got, unattributed, _, err := parseEPPMetrics(strings.NewReader(text), []string{"p1", "p2"})
	require.NoError(t, err)
	assert.Equal(t, 5, unattributed, "running, queue, two flow-control series, KV cache")
	for p, ready := range map[string]float64{"p1": 2, "p2": 5} {
		require.Contains(t, got, p)
		assert.Equal(t, []string{signals.NameAverageRunning, signals.NameAverageQueue, signals.NameFlowControlQueue, signals.NameAverageKVCache}, got[p].missing(), p)
		assert.Equal(t, ready, got[p].values[2], p)
	}

	got, unattributed, _, err = parseEPPMetrics(strings.NewReader(strings.ReplaceAll(text, `{name="p2"} 5`, `{name="px"} 5`)), []string{"p1"})
	require.NoError(t, err)
	assert.Zero(t, unattributed)
	assert.True(t, got["p1"].qualified(), "one provider: its unlabelled series are its own")
	assert.Equal(t, [5]float64{3, 1, 2, 6, 0.5}, got["p1"].values)
}

// TestUnattributedSeriesCounted: a relay whose two providers share one
// metrics endpoint that serves unlabelled series does not give them to
// either, counts them, and says why in the condition.
func TestUnattributedSeriesCounted(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.4.4")
	url := textEPP(t, "127.0.4.4", func() string {
		return "llm_d_epp_average_running_requests 3\nllm_d_epp_ready_endpoints 2\n"
	})
	cfg := e.config(a, url)
	cfg.Providers = append(cfg.Providers, Provider{Name: "pool2", MetricsConfig: &MetricsConfig{Endpoint: url, StaleMetricsSeconds: 30}})
	r, reg := newRelay(t, cfg, newFakeClock())
	start(t, r, false)
	r.ScrapeOnce(context.Background())
	assert.Equal(t, 2.0, metricValue(t, reg, MetricUnattributed, nil))
	for _, p := range r.Status().Providers {
		c := p.Conditions[0]
		assert.Equal(t, "NoSeries", c.Reason, p.Name)
		assert.Contains(t, c.Message, "2 series without a name/inference_pool label not read", p.Name)
	}
	res, _ := e.fetch(r, a, a.epp)
	assert.NotContains(t, rowsOf(res, "a"), signals.NameReadyEndpoints+"/pool")
	assert.NotContains(t, rowsOf(res, "a"), signals.NameReadyEndpoints+"/pool2")
}

// TestG06_GenerationPerQualifiedBatch: a qualified batch (all five series)
// carries one grid_provider_config_generation row, stamped with the batch;
// an incomplete batch carries its rows but no generation. The value is an
// integer exact in a float64, stable across relay restarts, and changes
// with the provider's configGeneration or the EPP's build.
func TestG06_GenerationPerQualifiedBatch(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.3.1")
	var text atomic.Value
	text.Store(poolText("v1", true))
	url := textEPP(t, "127.0.3.1", func() string { return text.Load().(string) })
	clock := newFakeClock()
	cfg := e.config(a, url)
	r, _ := newRelay(t, cfg, clock)
	start(t, r, false)

	scrape := func() signals.Result {
		r.ScrapeOnce(context.Background())
		res, _ := e.fetch(r, a, a.epp)
		clock.Add(time.Second)
		return res
	}
	countGen := func(res signals.Result) (int, signals.Sample) {
		n, last := 0, signals.Sample{}
		for _, s := range res.Samples {
			if s.Name == signals.NameConfigGeneration {
				n++
				last = s
			}
		}
		return n, last
	}
	res := scrape()
	n, g1 := countGen(res)
	require.Equal(t, 1, n)
	assert.Equal(t, math.Trunc(g1.Value), g1.Value)
	assert.LessOrEqual(t, g1.Value, float64(signals.MaxGeneration))
	assert.True(t, g1.Stamp.Equal(rowsOf(res, "a")[signals.NameReadyEndpoints+"/pool"].Stamp), "stamped with its batch")
	st := r.Status()
	assert.Equal(t, uint64(g1.Value), st.Providers[0].Generation)

	// The same configuration and build: the same generation, also in a
	// relay started afresh.
	_, g := countGen(scrape())
	assert.Equal(t, g1.Value, g.Value)
	assert.Equal(t, uint64(g1.Value), generation(cfg.Site, cfg.Cluster, cfg.Providers[0], "build_ref=x,commit=v1"))

	// Not qualified: no flow-control series. Rows, no generation row.
	text.Store(poolText("v1", false))
	res = scrape()
	n, _ = countGen(res)
	assert.Equal(t, 0, n)
	assert.Len(t, rowsOf(res, "a"), 5, "four pool rows and publishes_load")
	assert.Equal(t, "IncompleteBatch", r.Status().Providers[0].Conditions[0].Reason)
	assert.Equal(t, "True", r.Status().Providers[0].Conditions[0].Status)

	// A new EPP build: a new generation.
	text.Store(poolText("v2", true))
	_, g2 := countGen(scrape())
	assert.NotEqual(t, g1.Value, g2.Value)
	// A new declared configuration generation: a new generation.
	p := cfg.Providers[0]
	p.ConfigGeneration = "7"
	assert.NotEqual(t, generation(cfg.Site, cfg.Cluster, p, "build_ref=x,commit=v1"), uint64(g1.Value))
}

// TestG08_StaleMetricsKeepsLastReadiness: while the scrape fails, the last
// batch is relayed with its own stamps for staleMetricsSeconds, then
// dropped for a readiness 0 row stamped at the window end; the provider
// still publishes load (G-50).
func TestG08_StaleMetricsKeepsLastReadiness(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.4.1")
	epp := newStubEPP(t, "127.0.4.1", "pool")
	epp.load(2, 0, 1, 0.2)
	clock := newFakeClock()
	cfg := e.config(a, epp.url)
	cfg.Providers[0].MetricsConfig.StaleMetricsSeconds = 30
	r, _ := newRelay(t, cfg, clock)
	start(t, r, false)
	r.ScrapeOnce(context.Background())

	epp.mode.Store(1)
	clock.Add(10 * time.Second)
	r.ScrapeOnce(context.Background())
	res, _ := e.fetch(r, a, a.epp)
	rows := rowsOf(res, "a")
	ready, ok := rows[signals.NameReadyEndpoints+"/pool"]
	require.True(t, ok, "the last readiness is kept")
	assert.Equal(t, 2.0, ready.Value)
	assert.True(t, ready.Stamp.Equal(t0), "with the stamp of its read, so the EPP sees no new sample")
	assert.Equal(t, 1.0, rows[signals.NamePublishesLoad+"/pool"].Value)

	clock.Add(20 * time.Second) // exactly 30 s after the read: still kept
	res, _ = e.fetch(r, a, a.epp)
	assert.Contains(t, rowsOf(res, "a"), signals.NameReadyEndpoints+"/pool")
	clock.Add(time.Second)
	res, _ = e.fetch(r, a, a.epp)
	rows = rowsOf(res, "a")
	assert.NotContains(t, rows, signals.NameAverageRunning+"/pool", "dropped after staleMetricsSeconds")
	ready = rows[signals.NameReadyEndpoints+"/pool"]
	assert.Equal(t, 0.0, ready.Value, "the readiness is not kept past the window")
	assert.True(t, ready.Stamp.Equal(t0.Add(30*time.Second)), "stamped at the window end: %s", ready.Stamp)
	assert.Len(t, rows, 2)
	assert.Equal(t, 1.0, rows[signals.NamePublishesLoad+"/pool"].Value, "still publishes load")
	assert.False(t, r.Status().Providers[0].Serving)

	epp.mode.Store(0)
	r.ScrapeOnce(context.Background())
	res, _ = e.fetch(r, a, a.epp)
	ready = rowsOf(res, "a")[signals.NameReadyEndpoints+"/pool"]
	assert.True(t, ready.Stamp.Equal(t0.Add(31*time.Second)))
}

// TestG08_WindowEndNotReadyAtEPP: the seed says staleMetricsSeconds is
// how long a failing scrape keeps the last readiness. What the EPP's
// store holds, fed every body the relay serves: the last readiness (2)
// within the window, no new sample; past it ready endpoints 0 (one new
// sample at the window end, not one per read), not the stale 2 that
// silence alone would keep standing until MaxAge; the other readings keep
// their old stamps (stale). A restarted peer relay does not take that
// lone 0 for load (G-49).
func TestG08_WindowEndNotReadyAtEPP(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.4.2")
	b := e.site("b", "127.0.4.3")
	epp := newStubEPP(t, "127.0.4.2", "pool")
	epp.load(2, 0, 1, 0.2)
	clock := newFakeClock()
	cfg := e.config(a, epp.url, b)
	cfg.Providers[0].MetricsConfig.StaleMetricsSeconds = 30
	r, _ := newRelay(t, cfg, clock)
	start(t, r, false)
	top, skipped := topology.Build(topology.Local{Site: "a", Cluster: "cluster-a"}, nil, nil)
	require.Empty(t, skipped)
	store := sitestore.New(top)
	read := func() sitestore.Provider {
		t.Helper()
		res, resp := e.fetch(r, a, a.epp)
		date, err := http.ParseTime(resp.Header.Get("Date"))
		require.NoError(t, err)
		store.Ingest(res.Samples, date, time.Now())
		site, _ := store.Snapshot().Site("a")
		p, ok := site.Provider("pool")
		require.True(t, ok)
		return *p
	}
	r.ScrapeOnce(context.Background())
	p := read()
	assert.Equal(t, 2.0, p.Ready.Value)
	epp.mode.Store(1)
	for _, d := range []time.Duration{10 * time.Second, 20 * time.Second} {
		clock.Add(d)
		r.ScrapeOnce(context.Background())
		p = read()
		assert.Equal(t, 2.0, p.Ready.Value, "kept within the window")
		assert.True(t, p.Stamp.Equal(t0), "no new sample")
	}
	end := t0.Add(30 * time.Second)
	for range 3 {
		clock.Add(2 * time.Second)
		r.ScrapeOnce(context.Background())
		p = read()
		assert.Equal(t, 0.0, p.Ready.Value, "past the window: not ready")
		assert.True(t, p.Ready.Stamp.Equal(end), "one sample, at the window end: %s", p.Ready.Stamp)
		assert.True(t, p.Running.Stamp.Equal(t0), "the other readings stay stale")
		assert.True(t, p.Stamp.Equal(t0), "the 0 does not make the load look fresh: %s", p.Stamp)
		assert.True(t, p.PublishesLoadKnown(), "G-50")
	}

	// A peer relay started now hears only that 0: the provider stays
	// unmeasured there.
	rb, _ := newRelay(t, e.config(b, "", a), clock)
	start(t, rb, false)
	rb.PollRound(context.Background())
	res, _ := e.fetch(rb, b, b.epp)
	for _, s := range res.Samples {
		if s.Site == "a" && s.Name == signals.NamePublishesLoad {
			assert.Equal(t, 0.0, s.Value, "G-47 b: no load received from a since b started")
		}
	}
	assert.Contains(t, rowsOf(res, "a"), signals.NameReadyEndpoints+"/pool", "the 0 is relayed")
}

// TestG08_NoBatchSinceStartNotReadyAtEPP: the provider's metrics fail
// from the relay's start (a restart during an EPP metrics outage), so the
// relay has no batch to keep. The EPP's store still holds the readiness
// the previous run of the relay sent; rows a body leaves out keep their
// value and publishes_load keeps the provider heard, so without a row it
// would stand forever. Once staleMetricsSeconds has passed since the
// start the relay sends ready endpoints 0, stamped at the start plus the
// window (one sample however often it is served).
func TestG08_NoBatchSinceStartNotReadyAtEPP(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.4.7")
	epp := newStubEPP(t, "127.0.4.7", "pool")
	epp.load(2, 0, 1, 0.2)
	clock := newFakeClock()
	cfg := e.config(a, epp.url)
	cfg.Providers[0].MetricsConfig.StaleMetricsSeconds = 30
	top, skipped := topology.Build(topology.Local{Site: "a", Cluster: "cluster-a"}, nil, nil)
	require.Empty(t, skipped)
	store := sitestore.New(top)
	read := func(r *Relay) sitestore.Provider {
		t.Helper()
		res, resp := e.fetch(r, a, a.epp)
		date, err := http.ParseTime(resp.Header.Get("Date"))
		require.NoError(t, err)
		store.Ingest(res.Samples, date, time.Now())
		site, _ := store.Snapshot().Site("a")
		p, ok := site.Provider("pool")
		require.True(t, ok)
		return *p
	}

	// The previous run of the relay read 2 ready endpoints.
	r1, _ := newRelay(t, cfg, clock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r1.Serve(ctx) }()
	<-r1.Ready()
	r1.ScrapeOnce(context.Background())
	require.Equal(t, 2.0, read(r1).Ready.Value)
	cancel()
	require.NoError(t, <-done)

	// It restarts while the EPP's metrics fail.
	epp.mode.Store(1)
	clock.Add(5 * time.Second)
	started := clock.Now()
	r2, _ := newRelay(t, cfg, clock)
	start(t, r2, false)
	for range 3 {
		clock.Add(10 * time.Second)
		r2.ScrapeOnce(context.Background())
		p := read(r2)
		assert.Equal(t, 2.0, p.Ready.Value, "within the window")
		assert.True(t, p.Ready.Stamp.Equal(t0))
	}
	end := started.Add(30 * time.Second)
	for range 3 {
		clock.Add(5 * time.Second)
		r2.ScrapeOnce(context.Background())
		p := read(r2)
		assert.Equal(t, 0.0, p.Ready.Value, "past the window: not ready")
		assert.True(t, p.Ready.Stamp.Equal(end), "one sample, at the window end: %s", p.Ready.Stamp)
		assert.True(t, p.Running.Stamp.Equal(t0), "the other readings stay stale")
		assert.True(t, p.Stamp.Equal(t0), "the 0 does not make the load look fresh: %s", p.Stamp)
		assert.True(t, p.PublishesLoadKnown(), "G-50")
	}
}

// TestG50_ScrapeFailureCondition: a failing scrape shows as a
// MetricsAvailable=False condition with its reason and message on /status,
// grid_provider_metrics_available 0; recovery turns it True again.
func TestG50_ScrapeFailureCondition(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.5.1")
	epp := newStubEPP(t, "127.0.5.1", "pool")
	epp.load(1, 0, 0, 0)
	clock := newFakeClock()
	r, reg := newRelay(t, e.config(a, epp.url), clock)
	start(t, r, false)

	status := func() ProviderStatus {
		resp, err := http.Get("http://" + r.AdminAddr() + "/status")
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var st Status
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		require.Len(t, st.Providers, 1)
		return st.Providers[0]
	}
	p := status()
	assert.Equal(t, Condition{Type: "MetricsAvailable", Status: "Unknown", Reason: "Pending", Message: "not scraped yet", LastTransitionTime: t0}, p.Conditions[0])

	r.ScrapeOnce(context.Background())
	p = status()
	assert.Equal(t, "True", p.Conditions[0].Status)
	assert.Equal(t, "Scraped", p.Conditions[0].Reason)
	assert.Equal(t, 1.0, metricValue(t, reg, MetricMetricsAvail, map[string]string{"provider": "pool"}))

	for _, tt := range []struct {
		mode   int32
		reason string
		msg    string
	}{{1, "HTTPStatus", "500 Internal Server Error"}, {2, "ScrapeFailed", "EOF"}} {
		epp.mode.Store(tt.mode)
		clock.Add(5 * time.Second)
		r.ScrapeOnce(context.Background())
		p = status()
		c := p.Conditions[0]
		assert.Equal(t, "MetricsAvailable", c.Type)
		assert.Equal(t, "False", c.Status)
		assert.Equal(t, tt.reason, c.Reason)
		assert.Contains(t, c.Message, tt.msg)
		assert.Contains(t, c.Message, epp.url)
		assert.Equal(t, t0.Add(5*time.Second), c.LastTransitionTime, "the transition time is the first failure's")
		assert.True(t, p.PublishesLoad)
		assert.Equal(t, 0.0, metricValue(t, reg, MetricMetricsAvail, map[string]string{"provider": "pool"}))
	}
	assert.Equal(t, 1.0, metricValue(t, reg, MetricScrapes, map[string]string{"provider": "pool", "result": ScrapeHTTPStatus}))
	assert.Equal(t, 1.0, metricValue(t, reg, MetricScrapes, map[string]string{"provider": "pool", "result": ScrapeFailed}))

	epp.mode.Store(0)
	clock.Add(time.Second)
	r.ScrapeOnce(context.Background())
	c := status().Conditions[0]
	assert.Equal(t, "True", c.Status)
	assert.Equal(t, t0.Add(11*time.Second), c.LastTransitionTime)
}

// TestG03_RelaysEverySiteToLocalEPP: the local EPP gets every site's rows
// (its own and its peers', each tagged with the verified site) under a
// Date from the relay's clock; a peer gets this site's rows only; another
// identity gets 403. Peer round stamps and counts come with the peers'
// rows (§2.11 #5).
func TestG03_RelaysEverySiteToLocalEPP(t *testing.T) {
	e := newEnv(t)
	a, b, c := e.site("a", "127.0.6.1"), e.site("b", "127.0.6.2"), e.site("c", "127.0.6.3")
	clock := newFakeClock()
	relays := map[string]*Relay{}
	regs := map[string]*prometheus.Registry{}
	for _, s := range []*testSite{a, b, c} {
		epp := newStubEPP(t, s.ip, "pool")
		epp.load(int(s.ip[len(s.ip)-1]-'0'), 1, 1, 0.5)
		var peers []*testSite
		for _, p := range []*testSite{a, b, c} {
			if p != s {
				peers = append(peers, p)
			}
		}
		r, reg := newRelay(t, e.config(s, epp.url, peers...), clock)
		relays[s.name], regs[s.name] = r, reg
		start(t, r, false)
		r.ScrapeOnce(context.Background())
	}
	clock.Add(time.Second)
	relays["a"].PollRound(context.Background())
	clock.Add(500 * time.Millisecond)

	res, resp := e.fetch(relays["a"], a, a.epp)
	assert.Equal(t, []string{"a", "b", "c"}, sitesOf(res))
	assert.Equal(t, clock.Now().UTC().Format(http.TimeFormat), resp.Header.Get("Date"))
	assert.Equal(t, signals.ContentType, resp.Header.Get("Content-Type"))
	for _, site := range []string{"b", "c"} {
		rows := rowsOf(res, site)
		want := float64(map[string]int{"b": 2, "c": 3}[site])
		assert.Equal(t, want, rows[signals.NameReadyEndpoints+"/pool"].Value, site)
		assert.Equal(t, "cluster-"+site, rows[signals.NameReadyEndpoints+"/pool"].Cluster)
		assert.Equal(t, 1.0, rows[signals.NamePeerRounds+"/"].Value, site)
		assert.Equal(t, float64(t0.Add(time.Second).UnixMilli())/1e3, rows[signals.NamePeerRoundEnd+"/"].Value, site)
		assert.True(t, rows[signals.NamePeerRoundEnd+"/"].Stamp.Equal(t0.Add(time.Second)))
		assert.Equal(t, 1.0, rows[signals.NamePublishesLoad+"/pool"].Value)
		assert.Contains(t, rows, signals.NameConfigGeneration+"/pool")
	}
	assert.Equal(t, 1.0, rowsOf(res, "a")[signals.NameReadyEndpoints+"/pool"].Value)

	// A peer gets this site's rows only.
	res, _ = e.fetch(relays["a"], a, b.leaf)
	assert.Equal(t, []string{"a"}, sitesOf(res))
	// A stranger gets 403 and is counted.
	_, resp = e.fetch(relays["a"], a, e.ca.SiteLeaf(t, "z"))
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	for client, want := range map[string]float64{ClientLocalEPP: 1, ClientPeer: 1, ClientRefused: 1} {
		assert.Equal(t, want, metricValue(t, regs["a"], MetricRequests, map[string]string{"client": client}), client)
	}
}
