package learner

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

func gathered(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func TestG66_MetricsLabelSetsArePinned(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	r := newRig(t, shedding(), nil, modelPeers()...)
	r.l.metrics = m
	learn(r)
	want := map[string][]string{
		MetricCeilingSoft: {"cluster", "site"}, MetricCeilingHard: {"cluster", "site"}, MetricCeiling: {"cluster", "site"},
		MetricRhoReported: {"cluster", "site"}, MetricRhoCounted: {"cluster", "site"}, MetricRho: {"cluster", "site"},
		MetricWeight: {"cluster", "site"}, MetricShedding: {"model"},
	}
	mfs := gathered(t, reg)
	require.Len(t, mfs, len(want))
	for name, labels := range want {
		mf := mfs[name]
		require.NotNil(t, mf, name)
		assert.Equal(t, dto.MetricType_GAUGE, mf.GetType(), name)
		for _, mt := range mf.GetMetric() {
			var got []string
			for _, lp := range mt.GetLabel() {
				got = append(got, lp.GetName())
			}
			slices.Sort(got)
			assert.Equal(t, labels, got, name)
		}
	}
	// A second registration on the same registerer fails cleanly.
	_, err = NewMetrics(reg)
	assert.Error(t, err)
}

func TestG66_SheddingGaugeAndSiteGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	r := newRig(t, shedding(), nil, modelPeers()...)
	r.l.metrics = m
	r.step(t0)
	for _, v := range m.siteVecs() {
		assert.True(t, math.IsNaN(val(v.WithLabelValues("b", "cb"))), "no reading: NaN, not 0")
	}
	learn(r)
	assert.InDelta(t, 10, val(m.ceiling.WithLabelValues("b", "cb")), 1e-9)
	assert.InDelta(t, 10, val(m.weight.WithLabelValues("b", "cb")), 1e-9)
	assert.True(t, math.IsNaN(val(m.hard.WithLabelValues("b", "cb"))), "no hard bound: NaN, not 0")
	assert.Zero(t, val(m.shedding.WithLabelValues("m1")))

	run(r, 1, 6, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	assert.Equal(t, 1.0, val(m.shedding.WithLabelValues("m1")), "1 while shed")
	assert.Equal(t, 0.0, val(m.shedding.WithLabelValues("m2")))
	run(r, 7, 7, map[string]ld{"a": atLimit, "b": drained, "c": drained})
	assert.Equal(t, 0.0, val(m.shedding.WithLabelValues("m1")), "0 after")

	// c leaves the topology: its gauges read NaN and stay.
	top, _ := topology.Build(topology.Local{Site: "a", Cluster: "ca"}, modelPeers()[:2], nil)
	r.top = top
	r.store.SetTopology(top)
	r.step(t0.Add(8 * time.Second))
	assert.True(t, math.IsNaN(val(m.ceiling.WithLabelValues("c", "cc"))))
	assert.True(t, math.IsNaN(val(m.weight.WithLabelValues("c", "cc"))))
	assert.Equal(t, 1.0, val(m.shedding.WithLabelValues("m2")), "c left: a alone serves m2, and is full")
	for _, v := range m.siteVecs() {
		assert.Equal(t, 3, count(v), "a, b and c (kept as NaN)")
	}
}

func TestMetricsRetainedSeriesAreBounded(t *testing.T) {
	m, err := NewMetrics(nil)
	require.NoError(t, err)
	l := New(Options{Settings: DefaultSettings(), Metrics: m})
	for i := 0; i < 3*maxRetainedSeries; i++ {
		name := "s" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		top, skipped := topology.Build(topology.Local{Site: "a", Cluster: "ca"}, []topology.Site{{Name: name, Cluster: "c" + name, Gateway: "127.0.0.2:1"}}, nil)
		require.Empty(t, skipped)
		l.Step(t0, top, nil)
	}
	assert.LessOrEqual(t, count(m.ceiling), maxRetainedSeries)
	assert.Equal(t, 1.0, float64(count(m.ceiling))/float64(count(m.ceiling)))
}

// val reads a gauge (the client's testutil would add a module).
func val(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

// count counts the series a collector has.
func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1024)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

func TestDebugOfNamesEveryState(t *testing.T) {
	assert.Nil(t, DebugOf(nil, DefaultSettings()))
	r := newRig(t, shedding(), fakeHealth{"c": true}, modelPeers()...)
	learn(r)
	sn := run(r, 1, 6, map[string]ld{"a": atLimit, "b": atLimit, "c": drained})
	d := DebugOf(sn, r.l.Settings())
	require.Len(t, d.Sites, 3)
	assert.Equal(t, []string{"m1", "m2"}, d.Shed, "c is demoted: a alone holds m2")
	assert.True(t, d.Shedding)
	assert.Equal(t, "6s", d.FreshnessWindow)
	a := d.Sites[0]
	assert.Equal(t, "a", a.Name)
	assert.True(t, a.Local && a.Full && a.Queued && a.Ready && a.PublishesLoad && a.Telemetry)
	require.NotNil(t, a.Ceiling)
	assert.InDelta(t, 10, *a.Ceiling, 0.05)
	require.NotNil(t, a.Weight)
	assert.True(t, d.Sites[2].Demoted)
	assert.Equal(t, "T4", a.Tier)
	assert.Equal(t, "T1", d.Sites[2].Tier, "c: drained, rho under 1")
	for i, tc := range []struct {
		s    sitestate.Site
		want string
	}{
		{sitestate.Site{}, "unready"},
		{sitestate.Site{Ready: true, Silent: true, Telemetry: true}, "silent"},
		{sitestate.Site{Ready: true}, "fallback"},
		{sitestate.Site{Ready: true, Telemetry: true, Room: true, Queued: true}, "T2"},
		{sitestate.Site{Ready: true, Telemetry: true, PublishesLoad: true, Queued: true}, "T3"},
		{sitestate.Site{Ready: true, Telemetry: true, PublishesLoad: true, Queued: true, Full: true}, "T4"},
		// Unmeasured: T1/T2 with room, else the fallback set (G-48).
		{sitestate.Site{Ready: true, Telemetry: true, Room: true}, "T1"},
		{sitestate.Site{Ready: true, Telemetry: true, Queued: true}, "fallback"},
		{sitestate.Site{Ready: true, Telemetry: true, Queued: true, Full: true}, "fallback"},
	} {
		assert.Equal(t, tc.want, TierOf(&tc.s), "case %d", i)
	}
}
