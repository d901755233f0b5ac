package scheduling

import (
	"errors"

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

// FrameworkMetrics are the collectors the framework owns.
type FrameworkMetrics struct {
	pluginDuration *prometheus.HistogramVec
}

// NewFrameworkMetrics registers the framework's collectors on reg. When
// they are already registered there (a configuration reload), the existing
// collectors are reused.
func NewFrameworkMetrics(reg prometheus.Registerer) (*FrameworkMetrics, error) {
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "inference_extension",
		Name:      "plugin_duration_seconds",
		Help:      "Time a plugin took at one extension point, in seconds.",
		Buckets:   []float64{0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1},
	}, []string{"extension_point", "plugin_type", "plugin_name"})
	if err := reg.Register(hv); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		existing, ok := are.ExistingCollector.(*prometheus.HistogramVec)
		if !ok {
			return nil, err
		}
		hv = existing
	}
	return &FrameworkMetrics{pluginDuration: hv}, nil
}

// observer returns the duration observer of one plugin at one extension
// point, resolved once so the hot path does no label lookup.
func (m *FrameworkMetrics) observer(point string, p Plugin) prometheus.Observer {
	if m == nil {
		return nopObserver{}
	}
	tn := p.TypedName()
	return m.pluginDuration.WithLabelValues(point, tn.Type, tn.Name)
}

type nopObserver struct{}

func (nopObserver) Observe(float64) {}
