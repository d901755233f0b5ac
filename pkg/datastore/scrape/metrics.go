package scrape

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/datastore/internal/promreg"
)

// Reasons of switchyard_scrape_errors_total.
const (
	ReasonTimeout        = "timeout"         // no complete answer within Options.Timeout
	ReasonConnect        = "connect"         // connection refused or broken, TLS or transport failure
	ReasonHTTPStatus     = "http_status"     // a status other than 200
	ReasonBodyTooLarge   = "body_too_large"  // the body exceeds Options.MaxBodyBytes
	ReasonParse          = "parse"           // not valid Prometheus text format
	ReasonMissingMetrics = "missing_metrics" // none of the engine's metrics could be read
)

var reasons = []string{ReasonTimeout, ReasonConnect, ReasonHTTPStatus, ReasonBodyTooLarge, ReasonParse, ReasonMissingMetrics}

type scraperMetrics struct {
	errors      *prometheus.CounterVec
	invalid     *prometheus.CounterVec
	duration    prometheus.Histogram
	stale       prometheus.Gauge
	loadUnknown prometheus.Gauge
	targets     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*scraperMetrics, error) {
	m := &scraperMetrics{}
	var err error
	if m.errors, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard",
		Name:      "scrape_errors_total",
		Help:      "Failed metrics scrapes of model-server endpoints, by reason (timeout, connect, http_status, body_too_large, parse, missing_metrics).",
	}, []string{"reason"})); err != nil {
		return nil, err
	}
	if m.invalid, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard",
		Name:      "scrape_invalid_values_total",
		Help:      "Load metrics of model-server endpoints that a scrape could not read (NaN, infinite, negative, of the wrong type or absent), by metric (queue, running, kv_cache); such a scrape leaves the endpoint's load unknown.",
	}, []string{"metric"})); err != nil {
		return nil, err
	}
	if m.duration, err = promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "switchyard",
		Name:      "scrape_duration_seconds",
		Help:      "Duration of metrics scrapes of model-server endpoints (successful or not), in seconds.",
		Buckets:   []float64{0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
	})); err != nil {
		return nil, err
	}
	if m.stale, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "switchyard",
		Name:      "endpoints_stale",
		Help:      "Endpoints whose metrics are not fresh (never scraped, last scrape failed, or older than the staleness threshold).",
	})); err != nil {
		return nil, err
	}
	if m.loadUnknown, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "switchyard",
		Name:      "endpoints_load_unknown",
		Help:      "Endpoints whose last scrape read their metrics but not their load (a load metric NaN, infinite, negative or absent); they are counted as stale too.",
	})); err != nil {
		return nil, err
	}
	if m.targets, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "switchyard",
		Name:      "scrape_targets",
		Help:      "Endpoints whose metrics are being scraped.",
	})); err != nil {
		return nil, err
	}
	for _, r := range reasons {
		m.errors.WithLabelValues(r)
	}
	for _, l := range loadMetrics {
		m.invalid.WithLabelValues(l)
	}
	return m, nil
}
