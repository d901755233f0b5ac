package metrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names. The GIE (v1.5.0) and llm-d router names are kept exactly,
// so existing dashboards and alerts keep working; see doc.go for the table.
const (
	NameRequestTotal              = "inference_objective_request_total"
	NameRequestErrorTotal         = "inference_objective_request_error_total"
	NameRequestDuration           = "inference_objective_request_duration_seconds"
	NameRequestSizes              = "inference_objective_request_sizes"
	NameResponseSizes             = "inference_objective_response_sizes"
	NameInputTokens               = "inference_objective_input_tokens"
	NameOutputTokens              = "inference_objective_output_tokens"
	NamePromptCachedTokens        = "inference_objective_prompt_cached_tokens"
	NameNormalizedTPOT            = "inference_objective_normalized_time_per_output_token_seconds"
	NameRequestTTFT               = "inference_objective_request_ttft_seconds"
	NameRunningRequests           = "inference_objective_running_requests"
	NameSchedulerE2E              = "inference_extension_scheduler_e2e_duration_seconds"
	NameSchedulerAttempts         = "inference_extension_scheduler_attempts_total"
	NameInfo                      = "inference_extension_info"
	NamePoolAvgKVCache            = "inference_pool_average_kv_cache_utilization"
	NamePoolAvgQueueSize          = "inference_pool_average_queue_size"
	NamePoolAvgRunning            = "inference_pool_average_running_requests"
	NamePoolReadyPods             = "inference_pool_ready_pods"
	NamePoolPerPodQueueSize       = "inference_pool_per_pod_queue_size"
	NameLLMDAvgKVCache            = "llm_d_epp_average_kv_cache_utilization"
	NameLLMDAvgQueueSize          = "llm_d_epp_average_queue_size"
	NameLLMDAvgRunning            = "llm_d_epp_average_running_requests"
	NameLLMDReadyEndpoints        = "llm_d_epp_ready_endpoints"
	NameLLMDPerEndpointQueue      = "llm_d_epp_per_endpoint_queue_size"
	NameLLMDFlowControlQueue      = "llm_d_epp_flow_control_queue_size"
	NameRefusals                  = "switchyard_request_refusals_total"
	NameConfigReloads             = "switchyard_config_reloads_total"
	NameConfigLastReloadSuccess   = "switchyard_config_last_reload_success_timestamp_seconds"
	NameExtprocBufferedBytes      = "switchyard_extproc_buffered_bytes"
	NameExtprocBufferedBytesLimit = "switchyard_extproc_buffered_bytes_limit"
)

// Error codes of inference_objective_request_error_total{error_code}: GIE's
// names (pkg/common/error in GIE v1.5.0) plus RequestEntityTooLarge for the
// 413 Switchyard answers when a body exceeds its limit and RequestTimeout
// for the 408 when a body does not arrive in time. The label is capped at
// MaxErrorCodes distinct values.
const (
	ErrorCodeUnknown               = "Unknown"
	ErrorCodeBadRequest            = "BadRequest"
	ErrorCodeUnauthorized          = "Unauthorized"
	ErrorCodeForbidden             = "Forbidden"
	ErrorCodeNotFound              = "NotFound"
	ErrorCodeRequestEntityTooLarge = "RequestEntityTooLarge"
	ErrorCodeRequestTimeout        = "RequestTimeout"
	ErrorCodeInternal              = "Internal"
	ErrorCodeServiceUnavailable    = "ServiceUnavailable"
	ErrorCodeModelServerError      = "ModelServerError"
	ErrorCodeResourceExhausted     = "ResourceExhausted"
)

// Status values of inference_extension_scheduler_attempts_total (GIE).
const (
	SchedulerStatusSuccess = "success"
	SchedulerStatusFailure = "failure"
)

// Histogram buckets, as GIE v1.5.0 defines them for each metric.
var (
	// latencyBuckets: 5 ms to 1 h (request duration, TTFT).
	latencyBuckets = []float64{
		0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6,
		8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200,
		1800, 2700, 3600,
	}
	// requestSizeBuckets: 64 B to 1 GiB.
	requestSizeBuckets = []float64{
		64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
		131072, 262144, 524288, 1048576, 2097152, 4194304, 8388608,
		16777216, 33554432, 67108864, 134217728, 268435456, 536870912, 1073741824,
	}
	// responseSizeBuckets: 1 B to 64 KiB (32778 is GIE's value, kept for
	// series compatibility).
	responseSizeBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536}
	// promptTokenBuckets: input and cached tokens, 1 to 1 Mi.
	promptTokenBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072, 262144, 524288, 1048576}
	// outputTokenBuckets: 1 to 8 Ki.
	outputTokenBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
	// ntpotBuckets: 1 ms to 10 s per output token.
	ntpotBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0}
	// schedulerBuckets: 100 µs to 100 ms.
	schedulerBuckets = []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1}
)

var (
	modelLabels        = []string{"model_name", "target_model_name"}
	modelPriorityLabel = []string{"model_name", "target_model_name", "priority"}
	modelErrorLabels   = []string{"model_name", "target_model_name", "error_code"}
	attemptLabels      = []string{"status", "target_model_name", "pod_name", "namespace", "port"}
	flowControlLabels  = []string{"fairness_id", "priority", "inference_pool", "model_name", "target_model_name"}
)

// Metrics records the EPP's own Prometheus metrics. All methods are safe for
// concurrent use and are no-ops on a nil *Metrics, so callers may pass nil
// to record nothing.
//
// The request-path methods resolve label children once per label
// combination and cache them; a call whose labels were seen before takes no
// lock and allocates nothing.
type Metrics struct {
	pool string

	requestTotal   *prometheus.CounterVec
	requestErrors  *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	requestSizes   *prometheus.HistogramVec
	responseSizes  *prometheus.HistogramVec
	inputTokens    *prometheus.HistogramVec
	outputTokens   *prometheus.HistogramVec
	cachedTokens   *prometheus.HistogramVec
	ntpot          *prometheus.HistogramVec
	ttft           *prometheus.HistogramVec
	running        *prometheus.GaugeVec
	schedulerE2E   prometheus.Observer
	attempts       *prometheus.CounterVec
	info           *prometheus.GaugeVec
	refusals       *prometheus.CounterVec
	reloadOK       prometheus.Counter
	reloadFailed   prometheus.Counter
	lastReloadOK   prometheus.Gauge
	flowQueue      prometheus.Gauge
	fc             *flowMetrics
	poolCollector  *poolCollector
	buffer         *bufferCollector
	infoMu         sync.Mutex
	now            func() time.Time
	pairs          sync.Map // pairKey -> *pairSeries
	requests       sync.Map // priorityKey -> prometheus.Counter
	errorsByCode   sync.Map // errorKey -> prometheus.Counter
	runningByModel sync.Map // string -> prometheus.Gauge
	attemptsByKey  sync.Map // attemptKey -> prometheus.Counter
	refusalsBy     sync.Map // string -> prometheus.Counter

	models     *limiter
	endpoints  *limiter
	namespaces *limiter
	codes      *limiter
	reasons    *limiter
}

// New registers the metrics on reg and returns the recorder. poolName is
// the value of the name/inference_pool label of the pool gauges. When a
// collector with the same description is already registered on reg (a
// second New on the same registry, for example after a restart of the
// serving loop), the registered collector is reused, so several Metrics
// values on one registry share their series. Any other registration
// conflict is an error naming the metric.
func New(reg prometheus.Registerer, poolName string) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil prometheus.Registerer")
	}
	m := &Metrics{
		pool:       sanitize(poolName),
		now:        time.Now,
		models:     newLimiter(MaxModelLabelValues),
		endpoints:  newLimiter(MaxEndpointLabelValues),
		namespaces: newLimiter(MaxNamespaceLabelValues),
		codes:      newLimiter(MaxErrorCodes),
		reasons:    newLimiter(MaxRefusalReasons),
	}
	r := registrar{reg: reg}
	m.requestTotal = registerVec(&r, NameRequestTotal, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameRequestTotal,
		Help: "Requests received, by requested model, target model and objective priority.",
	}, modelPriorityLabel))
	m.requestErrors = registerVec(&r, NameRequestErrorTotal, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameRequestErrorTotal,
		Help: "Requests that ended in an error, by requested model, target model and GIE error code.",
	}, modelErrorLabels))
	m.duration = registerHist(&r, NameRequestDuration, "Time from receiving a request to its complete response, in seconds.", latencyBuckets, modelLabels)
	m.requestSizes = registerHist(&r, NameRequestSizes, "Request body size in bytes.", requestSizeBuckets, modelLabels)
	m.responseSizes = registerHist(&r, NameResponseSizes, "Response body size in bytes.", responseSizeBuckets, modelLabels)
	m.inputTokens = registerHist(&r, NameInputTokens, "Prompt (input) tokens per request, as reported by the model server.", promptTokenBuckets, modelLabels)
	m.outputTokens = registerHist(&r, NameOutputTokens, "Generated (output) tokens per request, as reported by the model server.", outputTokenBuckets, modelLabels)
	m.cachedTokens = registerHist(&r, NamePromptCachedTokens, "Prompt tokens served from the model server's prefix cache per request.", promptTokenBuckets, modelLabels)
	m.ntpot = registerHist(&r, NameNormalizedTPOT, "Request duration divided by the number of output tokens, in seconds.", ntpotBuckets, modelLabels)
	m.ttft = registerHist(&r, NameRequestTTFT, "Time from receiving a request to the first response body byte, in seconds.", latencyBuckets, modelLabels)
	m.running = registerVec(&r, NameRunningRequests, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: NameRunningRequests,
		Help: "Requests currently in flight, by requested model.",
	}, []string{"model_name"}))
	e2e := registerHist(&r, NameSchedulerE2E, "Time one scheduling cycle took (admission, profiles, pick), in seconds.", schedulerBuckets, nil)
	m.attempts = registerVec(&r, NameSchedulerAttempts, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameSchedulerAttempts,
		Help: "Scheduling attempts, by outcome; successful attempts name the primary endpoint picked.",
	}, attemptLabels))
	m.info = registerVec(&r, NameInfo, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: NameInfo,
		Help: "Build information of the running endpoint picker; the value is always 1.",
	}, []string{"commit", "build_ref"}))
	m.refusals = registerVec(&r, NameRefusals, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameRefusals,
		Help: "Requests the endpoint picker answered itself instead of routing them, by reason.",
	}, []string{"reason"}))
	reloads := registerVec(&r, NameConfigReloads, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameConfigReloads,
		Help: "Configuration loads, by result (success or failure).",
	}, []string{"result"}))
	m.lastReloadOK = registerVec(&r, NameConfigLastReloadSuccess, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: NameConfigLastReloadSuccess,
		Help: "Unix time of the last successful configuration load, in seconds (0 before the first).",
	}))
	flow := registerVec(&r, NameLLMDFlowControlQueue, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: NameLLMDFlowControlQueue,
		Help: "Requests held in the flow-control queue; always 0 because Switchyard has no flow-control layer.",
	}, flowControlLabels))
	m.fc = registerFlowControl(&r, flow)
	m.poolCollector = registerVec(&r, "inference_pool_*", newPoolCollector())
	m.buffer = registerVec(&r, NameExtprocBufferedBytes, &bufferCollector{})
	if r.err != nil {
		return nil, r.err
	}
	m.schedulerE2E = e2e.WithLabelValues()
	m.reloadOK = reloads.WithLabelValues("success")
	m.reloadFailed = reloads.WithLabelValues("failure")
	m.flowQueue = flow.WithLabelValues("", "", m.pool, "", "")
	return m, nil
}

// registrar registers collectors and keeps the first error.
type registrar struct {
	reg prometheus.Registerer
	err error
}

// registerVec registers c, or returns the collector already registered
// under the same description.
func registerVec[C prometheus.Collector](r *registrar, name string, c C) C {
	if r.err != nil {
		return c
	}
	err := r.reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
		r.err = fmt.Errorf("metrics: %s is already registered as a %T, want %T", name, are.ExistingCollector, c)
		return c
	}
	r.err = fmt.Errorf("metrics: register %s: %w", name, err)
	return c
}

func registerHist(r *registrar, name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
	return registerVec(r, name, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    name,
		Help:    help,
		Buckets: buckets,
	}, labels))
}

// SetInfo sets inference_extension_info{commit,build_ref} to 1, replacing
// the series of an earlier call.
func (m *Metrics) SetInfo(commit, buildRef string) {
	if m == nil {
		return
	}
	m.infoMu.Lock()
	defer m.infoMu.Unlock()
	m.info.Reset()
	m.info.WithLabelValues(sanitize(commit), sanitize(buildRef)).Set(1)
}

// ConfigReload counts one configuration load (the initial one included) in
// switchyard_config_reloads_total{result} and, on success, sets
// switchyard_config_last_reload_success_timestamp_seconds to now.
func (m *Metrics) ConfigReload(ok bool) {
	if m == nil {
		return
	}
	if !ok {
		m.reloadFailed.Inc()
		return
	}
	m.reloadOK.Inc()
	m.lastReloadOK.Set(float64(m.now().UnixNano()) / 1e9)
}

// FlowControlQueueSize sets the series of llm_d_epp_flow_control_queue_size
// with empty flow labels, which New creates at 0 so that llm-d dashboards
// do not show "no data"; queued requests are counted per flow by
// FlowWaiting.
func (m *Metrics) FlowControlQueueSize(n int) {
	if m == nil {
		return
	}
	m.flowQueue.Set(float64(n))
}
