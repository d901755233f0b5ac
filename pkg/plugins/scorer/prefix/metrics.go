package prefix

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// indexerMetrics are the producer's collectors, named as in GIE v1.5.
// Every producer instance has its own index, so the size gauge carries a
// plugin_name label; the histograms add up the observations of all
// instances, as in GIE.
type indexerMetrics struct {
	size     prometheus.Gauge // this instance's child of the size vector
	hitRatio prometheus.Histogram
	hitBytes prometheus.Histogram

	sizeVec    *prometheus.GaugeVec
	pluginName string
}

// deleteSeries deletes the instance's size series.
func (m *indexerMetrics) deleteSeries() {
	m.sizeVec.DeleteLabelValues(m.pluginName)
}

// newIndexerMetrics registers the collectors on reg, or reuses those
// already registered there (another instance, or a configuration reload),
// and resolves the size gauge of the instance named pluginName.
func newIndexerMetrics(reg prometheus.Registerer, pluginName string) (*indexerMetrics, error) {
	sizeVec, err := registerOrReuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "inference_extension",
		Name:      "prefix_indexer_size",
		Help:      "Number of block hashes held by the approximate prefix-cache index of a producer instance.",
	}, []string{"plugin_name"}))
	if err != nil {
		return nil, err
	}
	ratio, err := registerOrReuse[prometheus.Histogram](reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "inference_extension",
		Name:      "prefix_indexer_hit_ratio",
		Help:      "Fraction of the prompt's prefix blocks the index believed the chosen endpoint held.",
		Buckets:   []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
	}))
	if err != nil {
		return nil, err
	}
	hitBytes, err := registerOrReuse[prometheus.Histogram](reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "inference_extension",
		Name:      "prefix_indexer_hit_bytes",
		Help:      "Length in prompt bytes of the prefix the index believed the chosen endpoint held.",
		Buckets:   []float64{0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536},
	}))
	if err != nil {
		return nil, err
	}
	return &indexerMetrics{size: sizeVec.WithLabelValues(pluginName), hitRatio: ratio, hitBytes: hitBytes, sizeVec: sizeVec, pluginName: pluginName}, nil
}

// registerOrReuse registers c, or returns the collector already registered
// under the same description (a second instance, or a configuration
// reload).
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
