package metrics

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/families.golden")

// newTest returns Metrics on a private registry.
func newTest(t testing.TB) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, "pool-a")
	require.NoError(t, err)
	return m, reg
}

// useAll calls every method once.
func useAll(m *Metrics) {
	m.RequestReceived("m", "t", 1)
	m.RequestError("m", "t", ErrorCodeBadRequest)
	m.RequestSize("m", "t", 100)
	m.ResponseSize("m", "t", 200)
	m.RequestDuration("m", "t", time.Second)
	m.Tokens("m", "t", 10, 20, 5)
	m.NormalizedTPOT("m", "t", time.Second, 20)
	m.TTFT("m", "t", 100*time.Millisecond)
	m.RunningRequests("m", 1)
	m.SchedulerE2E(time.Millisecond)
	m.SchedulerAttempt(true, "t", "pod-1", "ns", 8000)
	m.Refusal("saturated")
	m.ConfigReload(true)
	m.SetInfo("abc123", "v0.1.0")
	m.UpdatePool([]PoolSample{{Name: "pod-1", Ready: true, Queue: 1, Running: 2, KVUsage: 0.5}})
	m.FlowControlQueueSize(0)
	m.FlowWaiting("tenant-a", 1, "m", "t", 100, 1)
	m.FlowDone("tenant-a", 1, "m", "t", "Dispatched", time.Microsecond, time.Millisecond)
	m.FlowDispatchCycle(time.Microsecond)
	m.BufferBudget(8<<20, func() int64 { return 4096 })
}

func gather(t testing.TB, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// describe renders one line per family: name, type, sorted label names.
func describe(fams map[string]*dto.MetricFamily) string {
	var lines []string
	for name, f := range fams {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names := make([]string, 0, len(labels))
		for l := range labels {
			names = append(names, l)
		}
		slices.Sort(names)
		lines = append(lines, fmt.Sprintf("%s %s %s", name, f.GetType(), strings.Join(names, ",")))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// TestFamiliesGolden: after one use of every method, every metric exists
// with the expected type and label names.
func TestFamiliesGolden(t *testing.T) {
	m, reg := newTest(t)
	useAll(m)
	got := describe(gather(t, reg))
	path := filepath.Join("testdata", "families.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), got, "run go test -run TestFamiliesGolden -update to accept")
}

// TestDocListsEveryMetric: the table in doc.go names every exported family.
func TestDocListsEveryMetric(t *testing.T) {
	m, reg := newTest(t)
	useAll(m)
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	for name := range gather(t, reg) {
		assert.Contains(t, string(doc), "//\t"+name+" ", "doc.go table misses %s", name)
	}
}

// lintExempt lists the promlint findings kept on purpose. llm-d router's
// prefix llm_d_epp_ contains "_d_", which promlint reads as an abbreviated
// unit (d = days); the names are llm-d's, which dashboards query, so
// compatibility wins. Every GIE name passes.
var lintExempt = map[string]string{
	NameLLMDAvgKVCache:       "llm-d router name (llm_d_ prefix)",
	NameLLMDAvgQueueSize:     "llm-d router name (llm_d_ prefix)",
	NameLLMDAvgRunning:       "llm-d router name (llm_d_ prefix)",
	NameLLMDReadyEndpoints:   "llm-d router name (llm_d_ prefix)",
	NameLLMDPerEndpointQueue: "llm-d router name (llm_d_ prefix)",
	NameLLMDFlowControlQueue: "llm-d router name (llm_d_ prefix)",
}

// TestPromlint: every name passes promlint except the documented GIE names.
func TestPromlint(t *testing.T) {
	m, reg := newTest(t)
	useAll(m)
	fams, err := reg.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	require.NoError(t, err)
	used := map[string]bool{}
	for _, p := range problems {
		if _, ok := lintExempt[p.Metric]; ok && p.Text == "metric names should not contain abbreviated units" {
			used[p.Metric] = true
			t.Logf("exempt: %s: %s", p.Metric, p.Text)
			continue
		}
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for name := range lintExempt {
		if !used[name] {
			t.Errorf("lintExempt lists %s, which passes promlint: remove it", name)
		}
	}
}

// TestReRegistration: a second New on the same registry reuses the
// registered collectors, and both recorders write the same series.
func TestReRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(reg, "pool-a")
	require.NoError(t, err)
	b, err := New(reg, "pool-a")
	require.NoError(t, err)
	a.RequestReceived("m", "t", 0)
	b.RequestReceived("m", "t", 0)
	a.UpdatePool([]PoolSample{{Name: "p", Ready: true, Queue: 4}})
	fams := gather(t, reg)
	require.Len(t, fams[NameRequestTotal].GetMetric(), 1)
	assert.Equal(t, 2.0, fams[NameRequestTotal].GetMetric()[0].GetCounter().GetValue())
	b.UpdatePool([]PoolSample{{Name: "q", Ready: true, Queue: 6}})
	fams = gather(t, reg)
	require.Len(t, fams[NamePoolPerPodQueueSize].GetMetric(), 1, "both recorders share the pool collector")
	assert.Equal(t, 6.0, fams[NamePoolAvgQueueSize].GetMetric()[0].GetGauge().GetValue())
}

// TestRegistrationConflict: a foreign collector under one of our names is
// an error that names the metric.
func TestRegistrationConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: NameRequestTotal, Help: "other"}, []string{"x"}))
	_, err := New(reg, "p")
	require.Error(t, err)
	assert.Contains(t, err.Error(), NameRequestTotal)

	_, err = New(nil, "p")
	require.EqualError(t, err, "metrics: nil prometheus.Registerer")
}

// TestNilMetrics: every method is a no-op on a nil *Metrics.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	assert.NotPanics(t, func() { useAll(m) })
}

func counterValue(t *testing.T, f *dto.MetricFamily, labels map[string]string) float64 {
	t.Helper()
	m := find(t, f, labels)
	return m.GetCounter().GetValue()
}

func find(t *testing.T, f *dto.MetricFamily, labels map[string]string) *dto.Metric {
	t.Helper()
	require.NotNil(t, f)
	for _, m := range f.GetMetric() {
		ok := true
		for _, l := range m.GetLabel() {
			if v, want := labels[l.GetName()]; want && v != l.GetValue() {
				ok = false
			}
		}
		if ok {
			return m
		}
	}
	t.Fatalf("%s: no series with %v", f.GetName(), labels)
	return nil
}

// TestRequestPathValues checks labels and GIE's skip rules.
func TestRequestPathValues(t *testing.T) {
	m, reg := newTest(t)
	m.RequestReceived("m", "t", -1)
	m.RequestReceived("m", "t", -1)
	m.RequestReceived("m", "t", 2)
	m.RequestError("m", "t", "") // GIE: empty code records nothing
	m.RequestError("m", "t", ErrorCodeResourceExhausted)
	m.RequestDuration("m", "t", 0) // not positive: skipped
	m.RequestDuration("m", "t", 2*time.Second)
	m.NormalizedTPOT("m", "t", 2*time.Second, 0) // no tokens: skipped
	m.NormalizedTPOT("m", "t", 2*time.Second, 4)
	m.Tokens("m", "t", 0, 0, 0) // only cached (0 = a miss) is recorded
	m.RunningRequests("", 1)    // empty model: skipped
	m.RunningRequests("m", 1)
	m.RunningRequests("m", 1)
	m.RunningRequests("m", -1)
	m.SchedulerAttempt(false, "t", "pod-1", "ns", 8000) // failure: no endpoint labels
	m.SchedulerAttempt(true, "t", "pod-1", "ns", 8000)
	m.SchedulerAttempt(true, "t", "", "", 0)
	m.ConfigReload(false)
	m.now = func() time.Time { return time.Unix(1700000000, 500_000_000) }
	m.ConfigReload(true)
	m.SetInfo("a", "b")
	m.SetInfo("c", "d")

	f := gather(t, reg)
	assert.Equal(t, 2.0, counterValue(t, f[NameRequestTotal], map[string]string{"priority": "-1"}))
	assert.Equal(t, 1.0, counterValue(t, f[NameRequestTotal], map[string]string{"priority": "2", "model_name": "m", "target_model_name": "t"}))
	require.Len(t, f[NameRequestErrorTotal].GetMetric(), 1)
	assert.Equal(t, 1.0, counterValue(t, f[NameRequestErrorTotal], map[string]string{"error_code": "ResourceExhausted"}))
	h := f[NameRequestDuration].GetMetric()[0].GetHistogram()
	assert.Equal(t, uint64(1), h.GetSampleCount())
	assert.Equal(t, 2.0, h.GetSampleSum())
	assert.Equal(t, 0.5, f[NameNormalizedTPOT].GetMetric()[0].GetHistogram().GetSampleSum())
	assert.Nil(t, f[NameInputTokens])
	assert.Nil(t, f[NameOutputTokens])
	assert.Equal(t, uint64(1), f[NamePromptCachedTokens].GetMetric()[0].GetHistogram().GetSampleCount())
	require.Len(t, f[NameRunningRequests].GetMetric(), 1)
	assert.Equal(t, 1.0, f[NameRunningRequests].GetMetric()[0].GetGauge().GetValue())
	assert.Equal(t, 1.0, counterValue(t, f[NameSchedulerAttempts], map[string]string{"status": "failure", "pod_name": "", "namespace": "", "port": ""}))
	assert.Equal(t, 1.0, counterValue(t, f[NameSchedulerAttempts], map[string]string{"status": "success", "pod_name": "pod-1", "namespace": "ns", "port": "8000", "target_model_name": "t"}))
	assert.Equal(t, 1.0, counterValue(t, f[NameSchedulerAttempts], map[string]string{"status": "success", "pod_name": "", "port": ""}))
	assert.Equal(t, 1.0, counterValue(t, f[NameConfigReloads], map[string]string{"result": "failure"}))
	assert.Equal(t, 1.0, counterValue(t, f[NameConfigReloads], map[string]string{"result": "success"}))
	assert.Equal(t, 1700000000.5, f[NameConfigLastReloadSuccess].GetMetric()[0].GetGauge().GetValue())
	require.Len(t, f[NameInfo].GetMetric(), 1, "SetInfo replaces the earlier series")
	assert.Equal(t, 1.0, find(t, f[NameInfo], map[string]string{"commit": "c", "build_ref": "d"}).GetGauge().GetValue())
	fc := f[NameLLMDFlowControlQueue].GetMetric()
	require.Len(t, fc, 1)
	assert.Equal(t, 0.0, fc[0].GetGauge().GetValue())
	assert.Equal(t, 1.0, counterValue(t, f[NameConfigReloads], map[string]string{"result": "success"}))
}

// TestBufferBudget: the buffer gauges read the attached source at every
// scrape, are absent before one is attached, and a second Metrics on the
// same registry (a restarted serving loop) takes the shared collector over.
func TestBufferBudget(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(reg, "pool-a")
	require.NoError(t, err)
	f := gather(t, reg)
	assert.Nil(t, f[NameExtprocBufferedBytes], "no series before a server attaches")
	assert.Nil(t, f[NameExtprocBufferedBytesLimit])

	var used atomic.Int64
	a.BufferBudget(512<<20, used.Load)
	used.Store(1234)
	f = gather(t, reg)
	assert.Equal(t, 1234.0, f[NameExtprocBufferedBytes].GetMetric()[0].GetGauge().GetValue())
	assert.Equal(t, float64(512<<20), f[NameExtprocBufferedBytesLimit].GetMetric()[0].GetGauge().GetValue())
	used.Store(0)
	f = gather(t, reg)
	assert.Equal(t, 0.0, f[NameExtprocBufferedBytes].GetMetric()[0].GetGauge().GetValue())

	b, err := New(reg, "pool-a")
	require.NoError(t, err)
	b.BufferBudget(8<<20, func() int64 { return 77 })
	f = gather(t, reg)
	require.Len(t, f[NameExtprocBufferedBytes].GetMetric(), 1)
	assert.Equal(t, 77.0, f[NameExtprocBufferedBytes].GetMetric()[0].GetGauge().GetValue())
	assert.Equal(t, float64(8<<20), f[NameExtprocBufferedBytesLimit].GetMetric()[0].GetGauge().GetValue())

	b.BufferBudget(0, nil)
	f = gather(t, reg)
	assert.Nil(t, f[NameExtprocBufferedBytes], "detached")
}

// TestFlowControlQueueExistsAtStart: the llm-d flow-control gauge and the
// reload counters exist before any use.
func TestFlowControlQueueExistsAtStart(t *testing.T) {
	_, reg := newTest(t)
	f := gather(t, reg)
	require.NotNil(t, f[NameLLMDFlowControlQueue])
	find(t, f[NameLLMDFlowControlQueue], map[string]string{"inference_pool": "pool-a"})
	require.Len(t, f[NameConfigReloads].GetMetric(), 2)
}

// TestLabelBounds: request-derived labels are capped, sanitized and
// truncated; paired running-request calls stay balanced past the cap.
func TestLabelBounds(t *testing.T) {
	m, reg := newTest(t)
	for i := range MaxModelLabelValues {
		m.RequestReceived(fmt.Sprintf("model-%d", i), "t", 0)
	}
	m.RequestReceived("late-model", "t", 0)
	m.RunningRequests("late-model", 1)
	m.RunningRequests("late-model-2", 1)
	m.RunningRequests("late-model", -1)
	m.RunningRequests("late-model-2", -1)
	m.RequestReceived("bad\xffutf8", "t", 0)
	for i := range MaxRefusalReasons + 5 {
		m.Refusal(fmt.Sprintf("r%d", i))
	}
	f := gather(t, reg)
	// MaxModelLabelValues-1 model-i + "t" fill the cap; the last model-i and
	// later names fold into "other".
	assert.Equal(t, 3.0, counterValue(t, f[NameRequestTotal], map[string]string{"model_name": OverflowLabelValue}))
	assert.Equal(t, 0.0, find(t, f[NameRunningRequests], map[string]string{"model_name": OverflowLabelValue}).GetGauge().GetValue())
	assert.Equal(t, 5.0, counterValue(t, f[NameRefusals], map[string]string{"reason": OverflowLabelValue}))
	assert.Len(t, f[NameRefusals].GetMetric(), MaxRefusalReasons+1)

	long := strings.Repeat("é", MaxLabelValueBytes) // 2 bytes per rune
	assert.Equal(t, strings.Repeat("é", MaxLabelValueBytes/2), sanitize(long))
	assert.Equal(t, "a\uFFFDb", sanitize("a\xffb"))
}

// TestLabelValuesNotRetained: cached keys are copies, not the caller's
// buffer.
func TestLabelValuesNotRetained(t *testing.T) {
	m, _ := newTest(t)
	buf := []byte("model-x")
	model := string(buf) // a fresh string; the limiter must clone what it keeps
	m.RequestSize(model, model, 1)
	m.pairs.Range(func(k, _ any) bool {
		pk := k.(pairKey)
		assert.Equal(t, "model-x", pk.model)
		assert.NotSame(t, unsafeData(model), unsafeData(pk.model))
		return true
	})
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }
