// Package coremetrics provides the core-metrics-extractor plugin: the
// data-layer extractor that maps a model server's Prometheus metrics to the
// endpoint metrics scheduling uses (waiting queue, running requests,
// KV-cache usage, LoRA adapters, KV-cache block size and count).
//
// Model servers name these metrics differently, so the plugin holds one
// EngineMapping per inference engine: the built-in vllm, sglang,
// trtllm-serve and triton-tensorrt-llm mappings, replaced or extended by
// engineConfigs. An endpoint's engine is the value of its engineLabelKey
// pod label, or defaultEngine when the label is missing or names no known
// engine. The plugin validates and resolves the configuration; the
// server's scraper reads the result with Engines, MappingFor,
// EngineLabelKey and DefaultEngine. Parameters, built-in names and rules
// match GIE v1.5's core-metrics-extractor.
package coremetrics

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type name used in configuration.
const Type = "core-metrics-extractor"

// Defaults and well-known names.
const (
	// DefaultEngineLabelKey is the pod label naming an endpoint's engine.
	DefaultEngineLabelKey = "inference.networking.k8s.io/engine-type"
	// DefaultEngineName is the engine of endpoints without the label.
	DefaultEngineName = "vllm"
	// ReservedEngineName cannot name an engine: GIE uses it internally for
	// the default mapping.
	ReservedEngineName = "default"
	// DefaultCacheBlockSizeLabel is the cacheInfoSpec label holding the KV
	// cache block size when cacheBlockSizeLabelName is empty.
	DefaultCacheBlockSizeLabel = "block_size"
	// DefaultCacheNumBlocksLabel is the cacheInfoSpec label holding the
	// number of KV cache blocks when cacheNumBlocksLabelName is empty.
	DefaultCacheNumBlocksLabel = "num_gpu_blocks"
)

// Params configures a core-metrics-extractor.
type Params struct {
	// EngineLabelKey is the pod label whose value names an endpoint's
	// engine. Default "inference.networking.k8s.io/engine-type"; empty
	// means the default; otherwise a valid Kubernetes label key.
	EngineLabelKey string `json:"engineLabelKey"`
	// DefaultEngine is the engine of endpoints without the label (or whose
	// label names no known engine). Default "vllm"; empty means the
	// default; otherwise a built-in engine or one in EngineConfigs.
	DefaultEngine string `json:"defaultEngine"`
	// EngineConfigs adds engines or replaces built-in ones. An entry named
	// like a built-in engine (vllm, sglang, trtllm-serve,
	// triton-tensorrt-llm) replaces it entirely: spec fields left out are
	// empty and disable that metric. Names must be unique, non-empty and
	// not "default".
	EngineConfigs []EngineConfig `json:"engineConfigs,omitempty"`
}

// EngineConfig is the metric mapping of one engine, as in GIE's
// engineConfigs. Each *Spec field is a metric selector such as
// `vllm:num_requests_waiting` or `nv_trt_llm_request_metrics{request_type=waiting}`;
// an empty spec disables that metric.
type EngineConfig struct {
	// Name is the engine's name, matched against the engineLabelKey label.
	Name string `json:"name"`
	// QueuedRequestsSpec selects the number of waiting requests.
	QueuedRequestsSpec string `json:"queuedRequestsSpec"`
	// RunningRequestsSpec selects the number of running requests.
	RunningRequestsSpec string `json:"runningRequestsSpec"`
	// KVUsageSpec selects the KV-cache usage, a fraction in [0, 1].
	KVUsageSpec string `json:"kvUsageSpec"`
	// LoRASpec selects the LoRA info series (labels running_lora_adapters,
	// waiting_lora_adapters and max_lora, as vLLM exposes them).
	LoRASpec string `json:"loraSpec"`
	// CacheInfoSpec selects an info series whose labels hold the KV-cache
	// block size and block count.
	CacheInfoSpec string `json:"cacheInfoSpec"`
	// CacheBlockSizeLabelName is the CacheInfoSpec label holding the block
	// size. Default "block_size".
	CacheBlockSizeLabelName string `json:"cacheBlockSizeLabelName,omitempty"`
	// CacheNumBlocksLabelName is the CacheInfoSpec label holding the block
	// count. Default "num_gpu_blocks".
	CacheNumBlocksLabelName string `json:"cacheNumBlocksLabelName,omitempty"`
	// CacheBlockSizeSpec selects the block size as a gauge value, for
	// engines without an info series.
	CacheBlockSizeSpec string `json:"cacheBlockSizeSpec,omitempty"`
	// CacheNumBlocksSpec selects the block count as a gauge value, for
	// engines without an info series.
	CacheNumBlocksSpec string `json:"cacheNumBlocksSpec,omitempty"`
}

// DefaultParams returns the defaults of GIE v1.5. The built-in engines are
// not listed in EngineConfigs: they are merged in by New, so that a
// configured list adds to them.
func DefaultParams() Params {
	return Params{EngineLabelKey: DefaultEngineLabelKey, DefaultEngine: DefaultEngineName}
}

// BuiltinEngines returns the engine mappings used when engineConfigs does
// not replace them, with the metric names of GIE v1.5.
func BuiltinEngines() []EngineConfig {
	return []EngineConfig{
		{
			Name:                "vllm",
			QueuedRequestsSpec:  "vllm:num_requests_waiting",
			RunningRequestsSpec: "vllm:num_requests_running",
			KVUsageSpec:         "vllm:kv_cache_usage_perc",
			LoRASpec:            "vllm:lora_requests_info",
			CacheInfoSpec:       "vllm:cache_config_info",
		},
		{
			Name:                    "sglang",
			QueuedRequestsSpec:      "sglang:num_queue_reqs",
			RunningRequestsSpec:     "sglang:num_running_reqs",
			KVUsageSpec:             "sglang:token_usage",
			CacheInfoSpec:           "sglang:cache_config_info",
			CacheBlockSizeLabelName: "page_size",
			CacheNumBlocksLabelName: "num_pages",
		},
		{
			Name:                "trtllm-serve",
			QueuedRequestsSpec:  "trtllm_num_requests_waiting",
			RunningRequestsSpec: "trtllm_num_requests_running",
			KVUsageSpec:         "trtllm_kv_cache_utilization",
			CacheBlockSizeSpec:  "trtllm_kv_cache_tokens_per_block",
			CacheNumBlocksSpec:  "trtllm_kv_cache_max_blocks",
		},
		{
			Name:                "triton-tensorrt-llm",
			QueuedRequestsSpec:  "nv_trt_llm_request_metrics{request_type=waiting}",
			RunningRequestsSpec: "nv_trt_llm_request_metrics{request_type=scheduled}",
			KVUsageSpec:         "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}",
			CacheBlockSizeSpec:  "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=tokens_per}",
			CacheNumBlocksSpec:  "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max}",
		},
	}
}

// vllmLegacyKVUsage is the KV-cache usage metric of older vLLM releases,
// renamed vllm:kv_cache_usage_perc. The built-in vllm mapping falls back to
// it.
const vllmLegacyKVUsage = "vllm:gpu_cache_usage_perc"

// EngineMapping is one engine's resolved metric mapping. A nil spec means
// the metric is not scraped. Read-only.
type EngineMapping struct {
	// Name is the engine's name.
	Name string
	// QueuedRequests selects the number of waiting requests.
	QueuedRequests *MetricSpec
	// RunningRequests selects the number of running requests.
	RunningRequests *MetricSpec
	// KVUsage selects the KV-cache usage fraction.
	KVUsage *MetricSpec
	// KVUsageFallback is read when the KVUsage family is absent. Only the
	// built-in vllm mapping has one (vllm:gpu_cache_usage_perc, the name in
	// older vLLM releases); configured engines never do.
	KVUsageFallback *MetricSpec
	// LoRA selects the LoRA info series; its value is a timestamp and the
	// series with the largest value is the current one.
	LoRA *MetricSpec
	// CacheInfo selects the info series carrying the block size and count
	// in its labels.
	CacheInfo *MetricSpec
	// CacheBlockSizeLabel is the CacheInfo label with the block size
	// (never empty).
	CacheBlockSizeLabel string
	// CacheNumBlocksLabel is the CacheInfo label with the block count
	// (never empty).
	CacheNumBlocksLabel string
	// CacheBlockSize selects the block size as a gauge value.
	CacheBlockSize *MetricSpec
	// CacheNumBlocks selects the block count as a gauge value.
	CacheNumBlocks *MetricSpec
}

// specField is one spec field of EngineConfig, with its JSON name.
type specField struct {
	json string
	get  func(*EngineConfig) string
	set  func(*EngineMapping, *MetricSpec)
}

var specFields = []specField{
	{"queuedRequestsSpec", func(c *EngineConfig) string { return c.QueuedRequestsSpec }, func(m *EngineMapping, s *MetricSpec) { m.QueuedRequests = s }},
	{"runningRequestsSpec", func(c *EngineConfig) string { return c.RunningRequestsSpec }, func(m *EngineMapping, s *MetricSpec) { m.RunningRequests = s }},
	{"kvUsageSpec", func(c *EngineConfig) string { return c.KVUsageSpec }, func(m *EngineMapping, s *MetricSpec) { m.KVUsage = s }},
	{"loraSpec", func(c *EngineConfig) string { return c.LoRASpec }, func(m *EngineMapping, s *MetricSpec) { m.LoRA = s }},
	{"cacheInfoSpec", func(c *EngineConfig) string { return c.CacheInfoSpec }, func(m *EngineMapping, s *MetricSpec) { m.CacheInfo = s }},
	{"cacheBlockSizeSpec", func(c *EngineConfig) string { return c.CacheBlockSizeSpec }, func(m *EngineMapping, s *MetricSpec) { m.CacheBlockSize = s }},
	{"cacheNumBlocksSpec", func(c *EngineConfig) string { return c.CacheNumBlocksSpec }, func(m *EngineMapping, s *MetricSpec) { m.CacheNumBlocks = s }},
}

// mapping parses an engine configuration; errors are prefixed with path.
func (c *EngineConfig) mapping(path string) (EngineMapping, []error) {
	m := EngineMapping{
		Name:                c.Name,
		CacheBlockSizeLabel: c.CacheBlockSizeLabelName,
		CacheNumBlocksLabel: c.CacheNumBlocksLabelName,
	}
	var errs []error
	for _, f := range specFields {
		spec, err := ParseMetricSpec(f.get(c))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %w", path, f.json, err))
			continue
		}
		f.set(&m, spec)
	}
	for _, l := range []struct {
		json string
		val  *string
		def  string
	}{
		{"cacheBlockSizeLabelName", &m.CacheBlockSizeLabel, DefaultCacheBlockSizeLabel},
		{"cacheNumBlocksLabelName", &m.CacheNumBlocksLabel, DefaultCacheNumBlocksLabel},
	} {
		switch {
		case *l.val == "":
			*l.val = l.def
		case !validLabelName(*l.val):
			errs = append(errs, fmt.Errorf("%s.%s: must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*), got %q", path, l.json, *l.val))
		}
	}
	return m, errs
}

func validLabelName(s string) bool {
	if s == "" || !isNameStart(s[0], false) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNameChar(s[i], false) {
			return false
		}
	}
	return true
}

// resolve validates p and returns the merged engine mappings.
func (p *Params) resolve() (map[string]EngineMapping, error) {
	var errs []error
	if p.EngineLabelKey != "" {
		if err := checkLabelKey(p.EngineLabelKey); err != nil {
			errs = append(errs, fmt.Errorf("engineLabelKey: %w", err))
		}
	}
	engines := make(map[string]EngineMapping, len(p.EngineConfigs)+4)
	for i := range p.EngineConfigs {
		c := &p.EngineConfigs[i]
		path := fmt.Sprintf("engineConfigs[%d]", i)
		switch _, dup := engines[c.Name]; {
		case c.Name == "":
			errs = append(errs, fmt.Errorf("%s.name: must not be empty", path))
		case c.Name == ReservedEngineName:
			errs = append(errs, fmt.Errorf("%s.name: %q is reserved", path, ReservedEngineName))
		case dup:
			errs = append(errs, fmt.Errorf("%s.name: engine %q is configured twice", path, c.Name))
		}
		m, merrs := c.mapping(path)
		errs = append(errs, merrs...)
		if c.Name != "" && c.Name != ReservedEngineName {
			engines[c.Name] = m
		}
	}
	for _, b := range BuiltinEngines() {
		if _, replaced := engines[b.Name]; replaced {
			continue
		}
		m, merrs := b.mapping("builtin " + b.Name)
		if len(merrs) > 0 {
			panic(errors.Join(merrs...)) // the built-in table is wrong
		}
		if b.Name == "vllm" {
			m.KVUsageFallback = &MetricSpec{Name: vllmLegacyKVUsage, Labels: map[string]string{}}
		}
		engines[b.Name] = m
	}
	if def := p.defaultEngine(); !hasKey(engines, def) {
		errs = append(errs, fmt.Errorf("defaultEngine: %q is not a known engine (known: %s)", def, strings.Join(engineNames(engines), ", ")))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return engines, nil
}

func (p *Params) defaultEngine() string {
	if p.DefaultEngine == "" {
		return DefaultEngineName
	}
	return p.DefaultEngine
}

func (p *Params) engineLabelKey() string {
	if p.EngineLabelKey == "" {
		return DefaultEngineLabelKey
	}
	return p.EngineLabelKey
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

func engineNames(engines map[string]EngineMapping) []string {
	return slices.Sorted(maps.Keys(engines))
}

// checkLabelKey checks a Kubernetes label key: an optional DNS subdomain
// prefix and "/", then a name of at most 63 characters made of
// alphanumerics, '-', '_' and '.', starting and ending with an
// alphanumeric.
func checkLabelKey(key string) error {
	name := key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		prefix := key[:i]
		name = key[i+1:]
		if !validDNSSubdomain(prefix) {
			return fmt.Errorf("invalid label key %q: the prefix before \"/\" must be a DNS subdomain (lower-case alphanumerics, '-' and '.', at most 253 characters)", key)
		}
	}
	if !validLabelKeyName(name) {
		return fmt.Errorf("invalid label key %q: the name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric", key)
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func validLabelKeyName(s string) bool {
	if len(s) == 0 || len(s) > 63 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func validDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			lowerAlnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
			if !lowerAlnum && (c != '-' || i == 0 || i == len(label)-1) {
				return false
			}
		}
	}
	return true
}

// Validate reports every invalid field.
func (p *Params) Validate() error {
	_, err := p.resolve()
	return err
}

// Extractor is a core-metrics-extractor instance. It is immutable.
type Extractor struct {
	name          string
	labelKey      string
	defaultEngine string
	engines       map[string]EngineMapping
}

// New builds an extractor from validated parameters.
func New(name string, p Params, h scheduling.Handle) (*Extractor, error) {
	engines, err := p.resolve()
	if err != nil {
		return nil, err
	}
	x := &Extractor{
		name:          name,
		labelKey:      p.engineLabelKey(),
		defaultEngine: p.defaultEngine(),
		engines:       engines,
	}
	if h != nil {
		log := h.Logger().V(1)
		for _, n := range engineNames(engines) {
			if off := engines[n].disabled(); len(off) > 0 {
				log.Info("Not scraping metrics", "plugin", name, "engine", n, "metrics", off)
			}
		}
	}
	return x, nil
}

// disabled lists the metrics the mapping does not scrape.
func (m EngineMapping) disabled() []string {
	var off []string
	for _, f := range []struct {
		name string
		spec *MetricSpec
	}{
		{"queuedRequests", m.QueuedRequests},
		{"runningRequests", m.RunningRequests},
		{"kvUsage", m.KVUsage},
		{"lora", m.LoRA},
	} {
		if f.spec == nil {
			off = append(off, f.name)
		}
	}
	if m.CacheInfo == nil && m.CacheBlockSize == nil && m.CacheNumBlocks == nil {
		off = append(off, "cacheInfo")
	}
	return off
}

// TypedName implements scheduling.Plugin.
func (x *Extractor) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: x.name}
}

// IsDataExtractor implements scheduling.DataExtractor.
func (x *Extractor) IsDataExtractor() {}

// Engines returns every engine's mapping by name: the built-in engines not
// replaced by engineConfigs and every configured engine. The map is a
// copy; the specs in it are shared and read-only.
func (x *Extractor) Engines() map[string]EngineMapping { return maps.Clone(x.engines) }

// EngineLabelKey returns the pod label that names an endpoint's engine.
func (x *Extractor) EngineLabelKey() string { return x.labelKey }

// DefaultEngine returns the engine of endpoints without a known engine
// label.
func (x *Extractor) DefaultEngine() string { return x.defaultEngine }

// MappingFor returns the mapping for an endpoint with these labels: the
// engine named by its EngineLabelKey label, or the default engine when
// the label is missing, empty or names no known engine (as in GIE).
func (x *Extractor) MappingFor(labels map[string]string) EngineMapping {
	if m, ok := x.engines[labels[x.labelKey]]; ok {
		return m
	}
	return x.engines[x.defaultEngine]
}

// Registration registers the core-metrics-extractor type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.DataExtractor = (*Extractor)(nil)
