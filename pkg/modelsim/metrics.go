package modelsim

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// vLLM metric names (the V1 engine's, plus the V0 KV gauge). They contain
// colons, which promlint discourages: they are vLLM's wire contract, the
// names every endpoint picker scrapes, so they are kept exactly.
const (
	metricWaiting        = "vllm:num_requests_waiting"
	metricRunning        = "vllm:num_requests_running"
	metricKVUsage        = "vllm:kv_cache_usage_perc"
	metricGPUCacheUsage  = "vllm:gpu_cache_usage_perc"
	metricLoRAInfo       = "vllm:lora_requests_info"
	metricCacheConfig    = "vllm:cache_config_info"
	metricPrefixQueries  = "vllm:prefix_cache_queries_total"
	metricPrefixHits     = "vllm:prefix_cache_hits_total"
	metricPromptTokens   = "vllm:prompt_tokens_total"
	metricGenTokens      = "vllm:generation_tokens_total"
	metricSuccess        = "vllm:request_success_total"
	metricPreemptions    = "vllm:num_preemptions_total"
	metricTTFT           = "vllm:time_to_first_token_seconds"
	metricE2E            = "vllm:e2e_request_latency_seconds"
	metricQueueTime      = "vllm:request_queue_time_seconds"
	metricInterTokenTime = "vllm:inter_token_latency_seconds"
)

// Histogram buckets as vLLM defines them, so dashboards built for vLLM work.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	interTokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
)

// engineMetrics are the histograms the engine observes as requests progress
// (wall-clock seconds, so they shrink with TimeScale like what clients see).
type engineMetrics struct {
	ttft      prometheus.Histogram
	e2e       prometheus.Histogram
	queueTime prometheus.Histogram
	itl       prometheus.Histogram
}

func newEngineMetrics(labels prometheus.Labels) *engineMetrics {
	h := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	return &engineMetrics{
		ttft:      h(metricTTFT, "Histogram of time to first token in seconds.", ttftBuckets),
		e2e:       h(metricE2E, "Histogram of end to end request latency in seconds.", requestLatencyBuckets),
		queueTime: h(metricQueueTime, "Histogram of time spent in the waiting queue in seconds.", requestLatencyBuckets),
		itl:       h(metricInterTokenTime, "Histogram of inter-token latency in seconds.", interTokenBuckets),
	}
}

// stateCollector renders the gauges and counters from the engine's state,
// read under the engine lock once per scrape, so one scrape is consistent.
type stateCollector struct {
	e *engine
	// gaugesOnly leaves out the counters: the collector of the registry
	// that answers a name[] request for gauges only.
	gaugesOnly bool
	// collects counts Collect calls (which registry answered a scrape).
	collects  atomic.Int64
	maxLoRA   string
	cacheInfo []string // label values of vllm:cache_config_info

	waiting, running, kvUsage, gpuUsage, loraInfo, cacheConfig  *prometheus.Desc
	prefixQueries, prefixHits, promptTokens, genTokens, success *prometheus.Desc
	preemptions                                                 *prometheus.Desc
}

func newStateCollector(e *engine, labels prometheus.Labels) *stateCollector {
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	cfg := e.cfg
	return &stateCollector{
		e:       e,
		maxLoRA: strconv.Itoa(cfg.MaxLoRAs),
		cacheInfo: []string{strconv.Itoa(cfg.BlockSize), "auto", "True", "0.9",
			"0", strconv.Itoa(cfg.KVBlocks)},
		waiting:  d(metricWaiting, "Number of requests waiting to be processed."),
		running:  d(metricRunning, "Number of requests in model execution batches."),
		kvUsage:  d(metricKVUsage, "KV-cache usage. 1 means 100 percent usage."),
		gpuUsage: d(metricGPUCacheUsage, "GPU KV-cache usage. 1 means 100 percent usage. Deprecated vLLM V0 name of vllm:kv_cache_usage_perc."),
		loraInfo: d(metricLoRAInfo, "Running stats on LoRA requests; the value is the time the adapter sets last changed.",
			"max_lora", "running_lora_adapters", "waiting_lora_adapters"),
		cacheConfig: d(metricCacheConfig, "Information of the engine's cache configuration.",
			"block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization", "num_cpu_blocks", "num_gpu_blocks"),
		prefixQueries: d(metricPrefixQueries, "Prefix cache queries, in terms of number of queried tokens."),
		prefixHits:    d(metricPrefixHits, "Prefix cache hits, in terms of number of cached tokens."),
		promptTokens:  d(metricPromptTokens, "Number of prefill tokens processed."),
		genTokens:     d(metricGenTokens, "Number of generation tokens processed."),
		success:       d(metricSuccess, "Count of successfully processed requests.", "finished_reason"),
		preemptions:   d(metricPreemptions, "Cumulative number of preemptions from the engine."),
	}
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.waiting, c.running, c.kvUsage, c.gpuUsage, c.loraInfo, c.cacheConfig} {
		ch <- d
	}
	if c.gaugesOnly {
		return
	}
	for _, d := range []*prometheus.Desc{c.prefixQueries, c.prefixHits, c.promptTokens, c.genTokens, c.success, c.preemptions} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.collects.Add(1)
	e := c.e
	e.mu.Lock()
	waiting, running := e.waiting.n, len(e.running)
	usage := float64(e.cache.used()) / float64(e.cache.total)
	runningLoRAs, waitingLoRAs, stamp := joinKeys(e.loraRunning), joinKeys(e.loraWaiting), e.loraStamp
	cnt := e.c
	e.mu.Unlock()

	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	counter := func(d *prometheus.Desc, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	gauge(c.waiting, float64(waiting))
	gauge(c.running, float64(running))
	gauge(c.kvUsage, usage)
	gauge(c.gpuUsage, usage)
	gauge(c.loraInfo, stamp, c.maxLoRA, runningLoRAs, waitingLoRAs)
	gauge(c.cacheConfig, 1, c.cacheInfo...)
	if c.gaugesOnly {
		return
	}
	counter(c.prefixQueries, cnt.prefixQueries)
	counter(c.prefixHits, cnt.prefixHits)
	counter(c.promptTokens, cnt.promptTokens)
	counter(c.genTokens, cnt.genTokens)
	for i, reason := range finishReasons {
		counter(c.success, cnt.finished[i], reason)
	}
	counter(c.preemptions, cnt.preemptions)
}

// otherNames are the families outside the gauges registry.
var otherNames = map[string]bool{metricPrefixQueries: true, metricPrefixHits: true, metricPromptTokens: true,
	metricGenTokens: true, metricSuccess: true, metricPreemptions: true, metricTTFT: true, metricE2E: true,
	metricQueueTime: true, metricInterTokenTime: true}

// registries are the server's private registries: vLLM exposes only its
// own metrics, so no Go runtime or process collectors are added. all holds
// every metric; gauges only the gauges (not otherNames), which is what a
// name[] request for load metrics is answered from, so that such a scrape
// collects no counter or histogram, as client_python's restricted
// registry collects only the collectors of the names asked for.
type registries struct {
	all, gauges           *prometheus.Registry
	allState, gaugesState *stateCollector
}

func newRegistries(e *engine, m *engineMetrics, labels prometheus.Labels) (*registries, error) {
	r := &registries{all: prometheus.NewRegistry(), gauges: prometheus.NewRegistry(),
		allState: newStateCollector(e, labels), gaugesState: newStateCollector(e, labels)}
	r.gaugesState.gaugesOnly = true
	for _, c := range []prometheus.Collector{r.allState, m.ttft, m.e2e, m.queueTime, m.itl} {
		if err := r.all.Register(c); err != nil {
			return nil, err
		}
	}
	if err := r.gauges.Register(r.gaugesState); err != nil {
		return nil, err
	}
	return r, nil
}
