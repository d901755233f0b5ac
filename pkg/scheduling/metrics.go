package scheduling

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Extension-point label values of inference_extension_plugin_duration_seconds.
const (
	PointProfileHandler    = "ProfilePicker"
	PointProcessResults    = "ProcessProfilesResults"
	PointFilter            = "Filter"
	PointScorer            = "Scorer"
	PointPicker            = "Picker"
	PointDataProducer      = "PrepareData"
	PointAdmitter          = "Admission"
	PointPreRequest        = "PreRequest"
	PointResponseReceived  = "ResponseReceived"
	PointResponseStreaming = "ResponseStreaming"
	PointResponseComplete  = "ResponseComplete"
)

// FrameworkMetrics are the collectors the framework owns, as one
// configuration uses them. Every FrameworkMetrics made on one registerer
// shares the same collector; each holds a reference on the series its
// profiles and schedulers resolved, and Release gives them back: a series
// no FrameworkMetrics holds any more is deleted.
type FrameworkMetrics struct {
	d    *durations
	mu   sync.Mutex
	held map[seriesLabels]struct{}
}

// seriesLabels are the label values of one plugin_duration_seconds series.
type seriesLabels struct{ point, pluginType, pluginName string }

// durations is the registered plugin_duration_seconds collector with the
// reference counts of its series, shared by every FrameworkMetrics made on
// the same registerer.
type durations struct {
	*prometheus.HistogramVec
	mu   sync.Mutex
	refs map[seriesLabels]int // nil: the series are not ours to delete
}

// NewFrameworkMetrics registers the framework's collectors on reg. When
// they are already registered there (a configuration reload), the existing
// collectors are reused.
func NewFrameworkMetrics(reg prometheus.Registerer) (*FrameworkMetrics, error) {
	d := &durations{HistogramVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "inference_extension",
		Name:      "plugin_duration_seconds",
		Help:      "Time a plugin took at one extension point, in seconds.",
		Buckets:   []float64{0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1},
	}, []string{"extension_point", "plugin_type", "plugin_name"}), refs: map[seriesLabels]int{}}
	if err := reg.Register(d); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		switch existing := are.ExistingCollector.(type) {
		case *durations:
			d = existing
		case *prometheus.HistogramVec:
			// Registered by someone else, who owns its series: Release
			// deletes none.
			d = &durations{HistogramVec: existing}
		default:
			return nil, err
		}
	}
	return &FrameworkMetrics{d: d, held: map[seriesLabels]struct{}{}}, nil
}

// observer returns the duration observer of one plugin at one extension
// point, resolved once so the hot path does no label lookup. The series
// stays until every FrameworkMetrics that resolved it is released.
func (m *FrameworkMetrics) observer(point string, p Plugin) prometheus.Observer {
	if m == nil {
		return nopObserver{}
	}
	tn := p.TypedName()
	k := seriesLabels{point, tn.Type, tn.Name}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if _, ok := m.held[k]; !ok && m.d.refs != nil {
		m.held[k] = struct{}{}
		m.d.refs[k]++
	}
	return m.d.WithLabelValues(point, tn.Type, tn.Name)
}

// Release gives back the series m resolved and deletes those that no
// other FrameworkMetrics of the registerer holds, so that plugin instances
// a reload dropped leave no series behind, while the series of instances
// the next configuration uses (under the same type and name) stay live.
// Release the configuration that stops serving after building the one
// that replaces it. Observers resolved earlier keep working and record
// nothing visible once their series is deleted. It returns the number of
// series deleted. m may be resolved again afterwards.
func (m *FrameworkMetrics) Release() int {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	deleted := 0
	for k := range m.held {
		delete(m.held, k)
		if m.d.refs[k]--; m.d.refs[k] > 0 {
			continue
		}
		delete(m.d.refs, k)
		if m.d.DeleteLabelValues(k.point, k.pluginType, k.pluginName) {
			deleted++
		}
	}
	return deleted
}

type nopObserver struct{}

func (nopObserver) Observe(float64) {}
