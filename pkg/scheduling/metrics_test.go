package scheduling_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

const pluginDurationMetric = "inference_extension_plugin_duration_seconds"

// series identifies one plugin_duration_seconds series.
type series struct{ point, pluginType, pluginName string }

// gatherDurations returns the sample count of every
// inference_extension_plugin_duration_seconds series in g.
func gatherDurations(t *testing.T, g prometheus.Gatherer) map[series]uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[series]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != pluginDurationMetric {
			continue
		}
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s has type %v, want HISTOGRAM", pluginDurationMetric, mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if len(labels) != 3 {
				t.Errorf("series has labels %v, want extension_point, plugin_type and plugin_name", labels)
			}
			out[series{labels["extension_point"], labels["plugin_type"], labels["plugin_name"]}] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

func newMetrics(t *testing.T, reg prometheus.Registerer) *scheduling.FrameworkMetrics {
	t.Helper()
	m, err := scheduling.NewFrameworkMetrics(reg)
	if err != nil {
		t.Fatalf("NewFrameworkMetrics: %v", err)
	}
	return m
}

func TestProfileRunRecordsPluginDurations(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newMetrics(t, reg)
	p, err := scheduling.NewProfile("default",
		[]scheduling.Filter{&schedulingtest.FakeFilter{Name: "keep-all", Keep: func(*scheduling.Endpoint) bool { return true }}},
		[]scheduling.WeightedScorer{
			{Scorer: &schedulingtest.FakeScorer{Name: "queue", Scores: map[string]float64{"a": 1}}, Weight: 1},
			{Scorer: &schedulingtest.FakeScorer{Name: "kv", Scores: map[string]float64{"b": 1}}, Weight: 2},
		},
		&schedulingtest.FakePicker{Name: "max"}, m)
	if err != nil {
		t.Fatal(err)
	}
	eps := namedEndpoints("a", "b")
	for range 3 {
		if _, err := p.Run(t.Context(), &scheduling.Request{}, eps); err != nil {
			t.Fatal(err)
		}
	}
	// Scores does not pick.
	if _, err := p.Scores(t.Context(), &scheduling.Request{}, eps); err != nil {
		t.Fatal(err)
	}

	want := map[series]uint64{
		{scheduling.PointFilter, "fake-filter", "keep-all"}: 4,
		{scheduling.PointScorer, "fake-scorer", "queue"}:    4,
		{scheduling.PointScorer, "fake-scorer", "kv"}:       4,
		{scheduling.PointPicker, "fake-picker", "max"}:      3,
	}
	if got := gatherDurations(t, reg); !reflect.DeepEqual(got, want) {
		t.Errorf("sample counts = %v, want %v", got, want)
	}
}

func TestSchedulerRecordsPluginDurations(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newMetrics(t, reg)
	hooks := &fakeHooks{name: "hooks"}
	p, err := scheduling.NewProfile("default", nil, nil, &schedulingtest.FakePicker{Name: "max"}, m)
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduling.NewScheduler(scheduling.SchedulerConfig{
		ProfileHandler:    singleProfileHandler("default", nil),
		Profiles:          []*scheduling.Profile{p},
		Producers:         []scheduling.DataProducer{&fakeProducer{name: "prod"}},
		Admitters:         []scheduling.Admitter{&fakeAdmitter{name: "adm"}},
		PreRequest:        []scheduling.PreRequest{hooks},
		ResponseReceived:  []scheduling.ResponseReceived{hooks},
		ResponseStreaming: []scheduling.ResponseStreaming{hooks},
		ResponseComplete:  []scheduling.ResponseComplete{hooks},
		Metrics:           m,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := &scheduling.Request{ID: "r"}
	res, err := s.Process(t.Context(), req, namedEndpoints("a"))
	if err != nil {
		t.Fatal(err)
	}
	target := res.Targets()[0]
	s.ResponseReceived(t.Context(), req, &scheduling.Response{}, target)
	s.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("x"), target)
	s.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("y"), target)
	s.ResponseComplete(t.Context(), req, &scheduling.Response{}, target)
	s.ResponseComplete(t.Context(), req, &scheduling.Response{}, target)

	want := map[series]uint64{
		{scheduling.PointDataProducer, "fake-producer", "prod"}:      1,
		{scheduling.PointAdmitter, "fake-admitter", "adm"}:           1,
		{scheduling.PointProfileHandler, "rounds-handler", "rounds"}: 2,
		{scheduling.PointProcessResults, "rounds-handler", "rounds"}: 1,
		{scheduling.PointPicker, "fake-picker", "max"}:               1,
		{scheduling.PointPreRequest, "fake-hooks", "hooks"}:          1,
		{scheduling.PointResponseReceived, "fake-hooks", "hooks"}:    1,
		{scheduling.PointResponseStreaming, "fake-hooks", "hooks"}:   2,
		{scheduling.PointResponseComplete, "fake-hooks", "hooks"}:    1,
	}
	if got := gatherDurations(t, reg); !reflect.DeepEqual(got, want) {
		t.Errorf("sample counts = %v, want %v", got, want)
	}
}

func TestNewFrameworkMetricsTwiceReusesCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m1 := newMetrics(t, reg)
	m2, err := scheduling.NewFrameworkMetrics(reg)
	if err != nil {
		t.Fatalf("second NewFrameworkMetrics on the same registry: %v", err)
	}
	// Profiles built on either metrics object observe into the same series.
	for _, m := range []*scheduling.FrameworkMetrics{m1, m2} {
		p, err := scheduling.NewProfile("default", nil, nil, &schedulingtest.FakePicker{Name: "max"}, m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Run(t.Context(), &scheduling.Request{}, namedEndpoints("a")); err != nil {
			t.Fatal(err)
		}
	}
	want := map[series]uint64{{scheduling.PointPicker, "fake-picker", "max"}: 2}
	if got := gatherDurations(t, reg); !reflect.DeepEqual(got, want) {
		t.Errorf("sample counts = %v, want %v", got, want)
	}
}

func TestNewFrameworkMetricsConflict(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: pluginDurationMetric, Help: "Something else."})
	if err := reg.Register(other); err != nil {
		t.Fatal(err)
	}
	if m, err := scheduling.NewFrameworkMetrics(reg); err == nil {
		t.Errorf("NewFrameworkMetrics = %v, want an error for a conflicting collector", m)
	}
}

func TestNilFrameworkMetrics(t *testing.T) {
	t.Parallel()
	p, err := scheduling.NewProfile("default", nil, nil, &schedulingtest.FakePicker{Name: "max"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(t.Context(), &scheduling.Request{}, namedEndpoints("a")); err != nil {
		t.Errorf("Run without metrics: %v", err)
	}
}

func TestPluginDurationLint(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newMetrics(t, reg)
	p, err := scheduling.NewProfile("default",
		[]scheduling.Filter{&schedulingtest.FakeFilter{Name: "keep-all", Keep: func(*scheduling.Endpoint) bool { return true }}},
		[]scheduling.WeightedScorer{{Scorer: &schedulingtest.FakeScorer{Name: "queue"}, Weight: 1}},
		&schedulingtest.FakePicker{Name: "max"}, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(t.Context(), &scheduling.Request{}, namedEndpoints("a")); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != pluginDurationMetric {
		t.Fatalf("gathered %d families, want only %s", len(mfs), pluginDurationMetric)
	}
	if !strings.HasSuffix(mfs[0].GetHelp(), ".") || mfs[0].GetHelp() == "" {
		t.Errorf("help %q is not a sentence", mfs[0].GetHelp())
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatalf("Lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// Release deletes the series no other FrameworkMetrics of the registry
// holds: a configuration that stops serving takes its plugins' series
// with it, but not those the configuration replacing it resolved under
// the same labels, which keep counting.
func TestFrameworkMetricsReleaseCountsReferences(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	profile := func(m *scheduling.FrameworkMetrics, picker string) *scheduling.Profile {
		p, err := scheduling.NewProfile("default", nil, nil, &schedulingtest.FakePicker{Name: picker}, m)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old, next := newMetrics(t, reg), newMetrics(t, reg)
	oldShared, oldOnly := profile(old, "shared"), profile(old, "old-only")
	profile(old, "shared") // resolved twice by one configuration: one reference
	nextShared := profile(next, "shared")
	for _, p := range []*scheduling.Profile{oldShared, oldOnly, nextShared} {
		if _, err := p.Run(t.Context(), &scheduling.Request{}, namedEndpoints("a")); err != nil {
			t.Fatal(err)
		}
	}
	if n := old.Release(); n != 1 {
		t.Errorf("Release deleted %d series, want 1 (old-only)", n)
	}
	// Requests still running on the old configuration stay safe.
	if _, err := oldOnly.Run(t.Context(), &scheduling.Request{}, namedEndpoints("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := nextShared.Run(t.Context(), &scheduling.Request{}, namedEndpoints("a")); err != nil {
		t.Fatal(err)
	}
	want := map[series]uint64{{scheduling.PointPicker, "fake-picker", "shared"}: 3}
	if got := gatherDurations(t, reg); !reflect.DeepEqual(got, want) {
		t.Errorf("after releasing the old configuration: %v, want %v", got, want)
	}
	if n := old.Release(); n != 0 {
		t.Errorf("second Release deleted %d series, want 0", n)
	}
	if n := next.Release(); n != 1 {
		t.Errorf("releasing the last holder deleted %d series, want 1", n)
	}
	if got := gatherDurations(t, reg); len(got) != 0 {
		t.Errorf("after releasing both: %v, want none", got)
	}
	var nilMetrics *scheduling.FrameworkMetrics
	if n := nilMetrics.Release(); n != 0 {
		t.Errorf("nil Release = %d", n)
	}
}

// A plugin_duration_seconds vector registered by someone else is used but
// its series are not deleted.
func TestFrameworkMetricsForeignCollectorIsNotDeleted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	foreign := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "inference_extension",
		Name:      "plugin_duration_seconds",
		Help:      "Time a plugin took at one extension point, in seconds.",
		Buckets:   []float64{0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1},
	}, []string{"extension_point", "plugin_type", "plugin_name"})
	reg.MustRegister(foreign)
	m := newMetrics(t, reg)
	if _, err := scheduling.NewProfile("default", nil, nil, &schedulingtest.FakePicker{Name: "max"}, m); err != nil {
		t.Fatal(err)
	}
	if n := m.Release(); n != 0 {
		t.Errorf("Release deleted %d series of a foreign collector", n)
	}
	if got := gatherDurations(t, reg); len(got) != 1 {
		t.Errorf("series = %v, want the picker's", got)
	}
}
