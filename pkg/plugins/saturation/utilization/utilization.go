// Package utilization provides the utilization-detector plugin: a
// saturation detector and scheduling filter driven by the queue depth and
// KV-cache usage that the data layer scrapes from model servers.
//
// An endpoint's saturation is its most constrained resource,
// max(queue/queueDepthThreshold, kvCache/kvCacheUtilThreshold); the pool's
// saturation is the unweighted mean over the candidates. Endpoints whose
// metrics are older than metricsStalenessThreshold (or were never scraped)
// count as fully saturated, so traffic is not sent into a blind spot. As a
// filter it removes endpoints over threshold×(1+headroom) or with stale
// metrics, and keeps every endpoint when none would remain (fail-open).
//
// This matches GIE v1.5's utilization-detector.
package utilization

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type name used in configuration.
const Type = "utilization-detector"

// Params configures a utilization-detector.
type Params struct {
	// QueueDepthThreshold is the waiting-queue length at which one endpoint
	// counts as fully saturated. Default 5; must be > 0.
	QueueDepthThreshold int `json:"queueDepthThreshold"`
	// KVCacheUtilThreshold is the KV-cache usage fraction at which one
	// endpoint counts as fully saturated. Default 0.8; must be in (0, 1].
	KVCacheUtilThreshold float64 `json:"kvCacheUtilThreshold"`
	// MetricsStalenessThreshold is how old an endpoint's metrics may be
	// before the endpoint counts as fully saturated and is filtered out,
	// as a Go duration string ("200ms", "1s"). Default "200ms"; must be > 0.
	// It should exceed the scrape interval by a comfortable margin.
	MetricsStalenessThreshold Duration `json:"metricsStalenessThreshold"`
	// Headroom is the burst allowance of the filter above the thresholds,
	// as a fraction: with 0.2 an endpoint is filtered out only at 120% of
	// a threshold. It does not change the saturation value. Default 0;
	// must be >= 0.
	Headroom float64 `json:"headroom"`
}

// DefaultParams returns the defaults of GIE v1.5.
func DefaultParams() Params {
	return Params{
		QueueDepthThreshold:       5,
		KVCacheUtilThreshold:      0.8,
		MetricsStalenessThreshold: Duration{Duration: 200 * time.Millisecond},
		Headroom:                  0,
	}
}

// Validate reports every invalid field.
func (p *Params) Validate() error {
	var errs []error
	if p.QueueDepthThreshold <= 0 {
		errs = append(errs, fmt.Errorf("queueDepthThreshold: must be > 0, got %d", p.QueueDepthThreshold))
	}
	if !(p.KVCacheUtilThreshold > 0 && p.KVCacheUtilThreshold <= 1) {
		errs = append(errs, fmt.Errorf("kvCacheUtilThreshold: must be in (0, 1], got %v", p.KVCacheUtilThreshold))
	}
	if err := p.MetricsStalenessThreshold.parseErr; err != nil {
		errs = append(errs, fmt.Errorf("metricsStalenessThreshold: %w", err))
	} else if p.MetricsStalenessThreshold.Duration <= 0 {
		errs = append(errs, fmt.Errorf("metricsStalenessThreshold: must be > 0, got %q", p.MetricsStalenessThreshold.Duration.String()))
	}
	if !(p.Headroom >= 0) {
		errs = append(errs, fmt.Errorf("headroom: must be >= 0, got %v", p.Headroom))
	}
	return errors.Join(errs...)
}

// Detector is a utilization-detector instance. It is immutable after New
// and safe for concurrent use.
type Detector struct {
	name      string
	queueThr  float64
	kvThr     float64
	staleness time.Duration
	queueLim  float64
	kvLim     float64

	// now is the clock used for staleness; tests replace it.
	now func() time.Time
}

// New builds a detector from validated parameters.
func New(name string, p Params, h scheduling.Handle) (*Detector, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Headroom > 1 && h != nil {
		h.Logger().Info("headroom above 1 allows more than twice the thresholds; check it is a fraction, not a percentage",
			"plugin", name, "headroom", p.Headroom)
	}
	return &Detector{
		name:      name,
		queueThr:  float64(p.QueueDepthThreshold),
		kvThr:     p.KVCacheUtilThreshold,
		staleness: p.MetricsStalenessThreshold.Duration,
		queueLim:  float64(p.QueueDepthThreshold) * (1 + p.Headroom),
		kvLim:     p.KVCacheUtilThreshold * (1 + p.Headroom),
		now:       time.Now,
	}, nil
}

// TypedName implements scheduling.Plugin.
func (d *Detector) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: d.name}
}

// freshSince returns the oldest UpdateTime still trusted at time now:
// metrics scraped before it are stale (now - UpdateTime > threshold).
// Metrics that were never scraped have a zero UpdateTime and are stale.
func (d *Detector) freshSince(now time.Time) time.Time { return now.Add(-d.staleness) }

func stale(m *scheduling.Metrics, freshSince time.Time) bool {
	return m.UpdateTime.Before(freshSince) || m.UpdateTime.IsZero()
}

// Saturation implements scheduling.SaturationDetector: the mean over the
// candidates of max(queue/queueDepthThreshold, kv/kvCacheUtilThreshold),
// with 1.0 for an endpoint with stale or missing metrics and 1.0 for an
// empty candidate list (fail closed: nothing to send to). The request is
// not used: the value depends on the endpoints' metrics alone.
func (d *Detector) Saturation(_ context.Context, _ *scheduling.Request, candidates []*scheduling.Endpoint) float64 {
	if len(candidates) == 0 {
		return 1
	}
	since := d.freshSince(d.now())
	var total float64
	for _, e := range candidates {
		m := e.Metrics()
		if stale(m, since) {
			total++
			continue
		}
		total += max(float64(m.WaitingQueueSize)/d.queueThr, m.KVCacheUsagePercent/d.kvThr)
	}
	return total / float64(len(candidates))
}

// PoolSaturation implements scheduling.PoolSaturationDetector: Saturation
// needs no request (the value depends on the endpoints' scraped metrics
// alone), so the pool view is the same computation.
func (d *Detector) PoolSaturation(candidates []*scheduling.Endpoint) float64 {
	return d.Saturation(context.Background(), nil, candidates)
}

// Filter implements scheduling.Filter: it keeps endpoints with fresh
// metrics whose queue is below queueDepthThreshold×(1+headroom) and whose
// KV-cache usage is below kvCacheUtilThreshold×(1+headroom). When no
// endpoint passes it returns all of them, so scorers can still pick the
// least bad one. When every endpoint passes it returns the input slice
// without allocating.
func (d *Detector) Filter(_ context.Context, _ *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	since := d.freshSince(d.now())
	var kept []*scheduling.Endpoint
	for i, e := range endpoints {
		if d.fits(e, since) {
			if kept != nil {
				kept = append(kept, e)
			}
			continue
		}
		if kept == nil {
			kept = make([]*scheduling.Endpoint, i, len(endpoints))
			copy(kept, endpoints[:i])
		}
	}
	switch {
	case kept == nil: // every endpoint passed
		return endpoints
	case len(kept) == 0: // none passed: fail open
		return endpoints
	}
	return kept
}

func (d *Detector) fits(e *scheduling.Endpoint, freshSince time.Time) bool {
	m := e.Metrics()
	if stale(m, freshSince) {
		return false
	}
	return float64(m.WaitingQueueSize) < d.queueLim && m.KVCacheUsagePercent < d.kvLim
}

// Duration is a time.Duration written in JSON as a Go duration string such
// as "200ms" or "1s", like GIE's metav1.Duration. Numbers are rejected. A
// string that does not parse is kept as an error that Params.Validate
// reports with the field's path.
type Duration struct {
	time.Duration
	parseErr error
}

// UnmarshalJSON implements json.Unmarshaler. null leaves the value unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) == 0 || b[0] != '"' {
		return &json.UnmarshalTypeError{Value: jsonValueKind(b), Type: reflect.TypeFor[string]()}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		*d = Duration{parseErr: fmt.Errorf("invalid duration %q: use a Go duration such as \"200ms\" or \"1s\"", s)}
		return nil
	}
	*d = Duration{Duration: v}
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.Duration.String())
}

func jsonValueKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// Registration registers the utilization-detector type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.SaturationDetector     = (*Detector)(nil)
	_ scheduling.PoolSaturationDetector = (*Detector)(nil)
	_ scheduling.Filter                 = (*Detector)(nil)
	_ json.Unmarshaler                  = (*Duration)(nil)
	_ json.Marshaler                    = Duration{}
)
