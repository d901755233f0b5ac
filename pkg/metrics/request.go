package metrics

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Cache keys. They hold the caller's strings only for the lookup; stored
// keys always hold canonical (bounded, cloned) strings.
type (
	pairKey struct{ model, target string }

	priorityKey struct {
		model, target string
		priority      int
	}

	errorKey struct{ model, target, code string }

	attemptKey struct {
		success              bool
		target, endpoint, ns string
		port                 int
	}
)

// pairSeries holds the histogram children of one (model, target) pair,
// resolved on first use so that a pair only exports the series it used
// (as GIE does).
type pairSeries struct {
	model, target string

	duration, requestSize, responseSize   lazyObserver
	inputTokens, outputTokens, cachedToks lazyObserver
	ntpot, ttft                           lazyObserver
}

// lazyObserver is a histogram child resolved on first use.
type lazyObserver struct {
	p atomic.Pointer[prometheus.Observer]
}

func (l *lazyObserver) observe(vec *prometheus.HistogramVec, s *pairSeries, v float64) {
	if o := l.p.Load(); o != nil {
		(*o).Observe(v)
		return
	}
	o := vec.WithLabelValues(s.model, s.target) // idempotent: a lost race resolves the same child
	l.p.Store(&o)
	o.Observe(v)
}

// series returns the cached children of (model, target).
func (m *Metrics) series(model, target string) *pairSeries {
	if v, ok := m.pairs.Load(pairKey{model, target}); ok {
		return v.(*pairSeries)
	}
	return m.seriesSlow(model, target)
}

func (m *Metrics) seriesSlow(model, target string) *pairSeries {
	k := pairKey{m.models.bound(model), m.models.bound(target)}
	if v, ok := m.pairs.Load(k); ok {
		return v.(*pairSeries)
	}
	v, _ := m.pairs.LoadOrStore(k, &pairSeries{model: k.model, target: k.target})
	return v.(*pairSeries)
}

// RequestReceived counts a request in
// inference_objective_request_total{model_name,target_model_name,priority}.
// model is the model the client asked for, target the model the request is
// sent to (after any rewrite); priority is the InferenceObjective priority
// (a configured value, so a small closed set).
func (m *Metrics) RequestReceived(model, target string, priority int) {
	if m == nil {
		return
	}
	if v, ok := m.requests.Load(priorityKey{model, target, priority}); ok {
		v.(prometheus.Counter).Inc()
		return
	}
	k := priorityKey{m.models.bound(model), m.models.bound(target), priority}
	c := m.requestTotal.WithLabelValues(k.model, k.target, strconv.Itoa(priority))
	m.requests.LoadOrStore(k, c)
	c.Inc()
}

// RequestError counts a failed request in
// inference_objective_request_error_total{model_name,target_model_name,error_code}.
// errorCode should be one of the ErrorCode constants (GIE's names); an
// empty code records nothing, as in GIE.
func (m *Metrics) RequestError(model, target, errorCode string) {
	if m == nil || errorCode == "" {
		return
	}
	if v, ok := m.errorsByCode.Load(errorKey{model, target, errorCode}); ok {
		v.(prometheus.Counter).Inc()
		return
	}
	k := errorKey{m.models.bound(model), m.models.bound(target), m.codes.bound(errorCode)}
	c := m.requestErrors.WithLabelValues(k.model, k.target, k.code)
	m.errorsByCode.LoadOrStore(k, c)
	c.Inc()
}

// RequestSize observes the request body size in
// inference_objective_request_sizes. Negative sizes are ignored.
func (m *Metrics) RequestSize(model, target string, bytes int) {
	if m == nil || bytes < 0 {
		return
	}
	s := m.series(model, target)
	s.requestSize.observe(m.requestSizes, s, float64(bytes))
}

// ResponseSize observes the response body size in
// inference_objective_response_sizes. Negative sizes are ignored.
func (m *Metrics) ResponseSize(model, target string, bytes int) {
	if m == nil || bytes < 0 {
		return
	}
	s := m.series(model, target)
	s.responseSize.observe(m.responseSizes, s, float64(bytes))
}

// RequestDuration observes the end-to-end request duration in
// inference_objective_request_duration_seconds. A duration that is not
// positive is ignored (GIE drops a completion time not after the receive
// time).
func (m *Metrics) RequestDuration(model, target string, d time.Duration) {
	if m == nil || d <= 0 {
		return
	}
	s := m.series(model, target)
	s.duration.observe(m.duration, s, d.Seconds())
}

// Tokens observes the token usage the model server reported, in
// inference_objective_input_tokens, _output_tokens and
// _prompt_cached_tokens. Call it only when the response carried usage. As in
// GIE, input and output counts that are not positive are skipped, while a
// cached count of 0 is recorded (it is a prefix-cache miss); a negative
// cached count is skipped.
func (m *Metrics) Tokens(model, target string, input, output, cached int) {
	if m == nil {
		return
	}
	s := m.series(model, target)
	if input > 0 {
		s.inputTokens.observe(m.inputTokens, s, float64(input))
	}
	if output > 0 {
		s.outputTokens.observe(m.outputTokens, s, float64(output))
	}
	if cached >= 0 {
		s.cachedToks.observe(m.cachedTokens, s, float64(cached))
	}
}

// NormalizedTPOT observes d / outputTokens in
// inference_objective_normalized_time_per_output_token_seconds, where d is
// the request duration. Nothing is recorded without output tokens or with a
// duration that is not positive.
func (m *Metrics) NormalizedTPOT(model, target string, d time.Duration, outputTokens int) {
	if m == nil || outputTokens <= 0 || d <= 0 {
		return
	}
	s := m.series(model, target)
	s.ntpot.observe(m.ntpot, s, d.Seconds()/float64(outputTokens))
}

// TTFT observes the time to the first response byte in
// inference_objective_request_ttft_seconds. Negative durations are ignored.
func (m *Metrics) TTFT(model, target string, d time.Duration) {
	if m == nil || d < 0 {
		return
	}
	s := m.series(model, target)
	s.ttft.observe(m.ttft, s, d.Seconds())
}

// RunningRequests adds delta (+1 when a request starts, -1 when it ends) to
// inference_objective_running_requests{model_name}. An empty model records
// nothing, as in GIE.
func (m *Metrics) RunningRequests(model string, delta int) {
	if m == nil || model == "" || delta == 0 {
		return
	}
	if v, ok := m.runningByModel.Load(model); ok {
		v.(prometheus.Gauge).Add(float64(delta))
		return
	}
	bm := m.models.bound(model)
	g := m.running.WithLabelValues(bm)
	m.runningByModel.LoadOrStore(bm, g)
	g.Add(float64(delta))
}

// SchedulerE2E observes one scheduling cycle in
// inference_extension_scheduler_e2e_duration_seconds. Negative durations
// are ignored.
func (m *Metrics) SchedulerE2E(d time.Duration) {
	if m == nil || d < 0 {
		return
	}
	m.schedulerE2E.Observe(d.Seconds())
}

// SchedulerAttempt counts one scheduling attempt in
// inference_extension_scheduler_attempts_total{status,target_model_name,pod_name,namespace,port}.
// target is the target model; endpointName, namespace and port name the
// primary endpoint picked. As in GIE, a failed attempt (and a success
// without an endpoint) records empty endpoint labels.
func (m *Metrics) SchedulerAttempt(success bool, target, endpointName, namespace string, port int) {
	if m == nil {
		return
	}
	if !success || endpointName == "" {
		endpointName, namespace, port = "", "", 0
	}
	if port < 0 {
		port = 0
	}
	if v, ok := m.attemptsByKey.Load(attemptKey{success, target, endpointName, namespace, port}); ok {
		v.(prometheus.Counter).Inc()
		return
	}
	k := attemptKey{success, m.models.bound(target), m.endpoints.bound(endpointName), m.namespaces.bound(namespace), port}
	status, portLabel := SchedulerStatusFailure, ""
	if success {
		status = SchedulerStatusSuccess
	}
	if k.endpoint != "" && port > 0 {
		portLabel = strconv.Itoa(port)
	}
	c := m.attempts.WithLabelValues(status, k.target, k.endpoint, k.ns, portLabel)
	m.attemptsByKey.LoadOrStore(k, c)
	c.Inc()
}

// Refusal counts a request the EPP answered itself (400, 413, 429, 503...)
// in switchyard_request_refusals_total{reason}.
//
// reason must come from a closed set chosen by the caller: the extproc
// server's Reason constants and the fixed reasons of admission plugins
// (scheduling.Refusal.Reason). Never pass request data (model names,
// headers, error text). As a backstop, at most MaxRefusalReasons distinct
// reasons get their own series; later ones count under
// OverflowLabelValue.
func (m *Metrics) Refusal(reason string) {
	if m == nil {
		return
	}
	if v, ok := m.refusalsBy.Load(reason); ok {
		v.(prometheus.Counter).Inc()
		return
	}
	br := m.reasons.bound(reason)
	c := m.refusals.WithLabelValues(br)
	m.refusalsBy.LoadOrStore(br, c)
	c.Inc()
}
