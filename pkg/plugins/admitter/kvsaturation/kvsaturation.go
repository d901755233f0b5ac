package kvsaturation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	pickel "github.com/switchyard-ai/switchyard/pkg/plugins/picker/engineload"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "kv-saturation-admitter"

// ReasonAdmissionReject is the refusal reason (and the reason label).
const ReasonAdmissionReject = "admission_reject"

// RefusalsMetric counts the refusals of kv-saturation-admitter instances.
const RefusalsMetric = "routing_admission_refusals_total"

// Reasons returns the closed set of reason label values.
func Reasons() []string { return []string{ReasonAdmissionReject} }

// Defaults.
const (
	DefaultKVUsageThreshold      = 0.98
	DefaultMaxStalenessIntervals = pickel.DefaultMaxStalenessIntervals
	DefaultRetryAfter            = time.Second
	// MaxRetryAfter bounds retryAfter.
	MaxRetryAfter = time.Hour
)

// Params configures a kv-saturation-admitter.
type Params struct {
	// KVUsageThreshold: a candidate is saturated when its fresh KV-cache
	// usage (clamped to [0, 1]) is above this. In [0, 1]; default 0.98.
	KVUsageThreshold float64 `json:"kvUsageThreshold"`
	// MaxStalenessIntervals: metrics older than this many scrape
	// intervals are stale. 1..1000; default 3.
	MaxStalenessIntervals int `json:"maxStalenessIntervals"`
	// ScrapeInterval is the metrics scrape interval, a Go duration.
	// Empty (the default) means the EPP's own (--refresh-metrics-interval)
	// or, without one, 50ms.
	ScrapeInterval string `json:"scrapeInterval,omitempty"`
	// RetryAfter is the Retry-After of the 503, a Go duration rounded up
	// to whole seconds. 1s..1h; default "1s".
	RetryAfter string `json:"retryAfter"`
}

// DefaultParams returns the defaults.
func DefaultParams() Params {
	return Params{
		KVUsageThreshold:      DefaultKVUsageThreshold,
		MaxStalenessIntervals: DefaultMaxStalenessIntervals,
		RetryAfter:            DefaultRetryAfter.String(),
	}
}

// Validate reports every invalid parameter, each prefixed by its field
// path.
func (p *Params) Validate() error {
	var errs []error
	if !(p.KVUsageThreshold >= 0 && p.KVUsageThreshold <= 1) {
		errs = append(errs, fmt.Errorf("kvUsageThreshold: must be in [0, 1], got %v", p.KVUsageThreshold))
	}
	if p.MaxStalenessIntervals < 1 || p.MaxStalenessIntervals > pickel.MaxStalenessIntervalsLimit {
		errs = append(errs, fmt.Errorf("maxStalenessIntervals: must be 1..%d, got %d", pickel.MaxStalenessIntervalsLimit, p.MaxStalenessIntervals))
	}
	if p.ScrapeInterval != "" {
		d, err := time.ParseDuration(strings.TrimSpace(p.ScrapeInterval))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("scrapeInterval: invalid duration %q: use a Go duration such as \"50ms\" or \"1s\"", p.ScrapeInterval))
		case d <= 0:
			errs = append(errs, fmt.Errorf("scrapeInterval: must be > 0, got %q", p.ScrapeInterval))
		}
	}
	d, err := time.ParseDuration(strings.TrimSpace(p.RetryAfter))
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("retryAfter: invalid duration %q: use a Go duration such as \"1s\"", p.RetryAfter))
	case d < time.Second || d > MaxRetryAfter:
		errs = append(errs, fmt.Errorf("retryAfter: must be 1s..1h, got %q", p.RetryAfter))
	}
	return errors.Join(errs...)
}

// Admitter is a kv-saturation-admitter instance. It is safe for
// concurrent use.
type Admitter struct {
	typedName  scheduling.TypedName
	params     Params
	horizon    time.Duration
	retryAfter time.Duration
	now        func() time.Time
	log        logr.Logger
	refusals   prometheus.Counter
	vec        *prometheus.CounterVec
	closed     atomic.Bool
	message    string
}

// New returns a kv-saturation-admitter.
func New(name string, p Params, h scheduling.Handle) (*Admitter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	interval := pickel.DefaultScrapeInterval
	if p.ScrapeInterval != "" {
		interval, _ = time.ParseDuration(strings.TrimSpace(p.ScrapeInterval))
	} else if host := scheduling.ScrapeIntervalOf(h); host > 0 {
		interval = host
	}
	retry, _ := time.ParseDuration(strings.TrimSpace(p.RetryAfter))
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: RefusalsMetric,
		Help: "Requests refused by admission plugins, by reason: admission_reject (kv-saturation-admitter: every healthy candidate's fresh KV-cache usage above the threshold).",
	}, []string{"admitter", "reason"})
	if err := h.Registerer().Register(vec); err != nil {
		are, ok := err.(prometheus.AlreadyRegisteredError)
		if !ok {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
		if vec, ok = are.ExistingCollector.(*prometheus.CounterVec); !ok {
			return nil, fmt.Errorf("register metrics: %s is registered as another kind", RefusalsMetric)
		}
	}
	a := &Admitter{
		typedName:  scheduling.TypedName{Type: Type, Name: name},
		params:     p,
		horizon:    interval * time.Duration(p.MaxStalenessIntervals),
		retryAfter: retry,
		now:        time.Now,
		log:        h.Logger().WithValues("plugin", name),
		vec:        vec,
		refusals:   vec.WithLabelValues(name, ReasonAdmissionReject),
		message: "every healthy candidate reports a KV-cache usage above " +
			strconv.FormatFloat(p.KVUsageThreshold, 'g', -1, 64) + ": the engines are about to preempt",
	}
	return a, nil
}

// TypedName implements scheduling.Plugin.
func (a *Admitter) TypedName() scheduling.TypedName { return a.typedName }

// EffectiveParams returns the parameters in use.
func (a *Admitter) EffectiveParams() any { return a.params }

// Horizon returns how old metrics may be and still count.
func (a *Admitter) Horizon() time.Duration { return a.horizon }

// healthy reports whether a candidate is in rotation: no failed probe, no
// open breaker. Endpoints without health state are healthy.
func healthy(e *scheduling.Endpoint, now time.Time) bool {
	h, ok := scheduling.HealthKey.Get(e)
	if !ok || h == nil {
		return true
	}
	ok, _ = h.Eligible(now)
	return ok
}

// serves reports whether an endpoint serves model: it declares nothing
// (then it serves every model, as for the served-model-filter), or model
// is one of its names or aliases. An empty model is served everywhere.
func serves(e *scheduling.Endpoint, model string) bool {
	if model == "" {
		return true
	}
	m, ok := scheduling.ModelsKey.Get(e)
	if !ok || m == nil || len(m.Entries) == 0 {
		return true
	}
	_, ok = m.Lookup(model)
	return ok
}

// Saturated reports whether every healthy candidate that serves model
// has fresh metrics with a KV-cache usage above the threshold. With no
// such candidate it is false: that is not this plugin's refusal to make.
// Candidates serving other models do not count: in a pool that serves
// several models, an idle engine of another model must not admit a
// request to saturated engines of its own.
func (a *Admitter) Saturated(candidates []*scheduling.Endpoint, model string) bool {
	now := a.now()
	any := false
	for _, e := range candidates {
		if !serves(e, model) {
			continue
		}
		// Health is looked up only where it changes the answer: for a
		// candidate that is not saturated, and until one saturated
		// candidate is known to be healthy.
		if pickel.Fresh(e.Metrics().UpdateTime, now, a.horizon) && pickel.KVUsage(e) > a.params.KVUsageThreshold {
			if !any && healthy(e, now) {
				any = true
			}
			continue
		}
		if healthy(e, now) {
			return false
		}
	}
	return any
}

// Admit implements scheduling.Admitter.
func (a *Admitter) Admit(_ context.Context, req *scheduling.Request, candidates []*scheduling.Endpoint) *scheduling.Refusal {
	model := ""
	if req != nil {
		model = req.TargetModel
	}
	if !a.Saturated(candidates, model) {
		return nil
	}
	if !a.closed.Load() {
		a.refusals.Inc()
	}
	// V(4): the refusal's one line at its own verbosity is extproc's
	// (a fallback chain may still serve the request).
	if l := a.log.V(4); l.Enabled() {
		id := ""
		if req != nil {
			id = req.ID
		}
		l.Info("KV saturation: request refused", "request", id, "candidates", len(candidates), "threshold", a.params.KVUsageThreshold)
	}
	return &scheduling.Refusal{
		StatusCode: http.StatusServiceUnavailable,
		Reason:     ReasonAdmissionReject,
		Message:    a.message,
		RetryAfter: a.retryAfter,
	}
}

// Close implements scheduling.Closer: the instance's series are deleted
// unless an instance of the same name serves on.
func (a *Admitter) Close(info scheduling.CloseInfo) {
	a.closed.Store(true)
	if !info.Successor {
		a.vec.DeletePartialMatch(prometheus.Labels{"admitter": a.typedName.Name})
	}
}

// Registration registers the kv-saturation-admitter.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Admitter = (*Admitter)(nil)
	_ scheduling.Closer   = (*Admitter)(nil)
)
