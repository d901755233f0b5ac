package config

import (
	"encoding/json"

	"github.com/switchyard-ai/switchyard/pkg/multisite/learner"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// API versions and kind accepted for EndpointPickerConfig.
const (
	APIVersionGIE  = "inference.networking.x-k8s.io/v1alpha1"
	APIVersionLLMD = scheduling.APIVersionLLMD
	Kind           = "EndpointPickerConfig"
)

// Feature gates known to GIE v1.3–v1.5.
const (
	GateDataLayer           = "dataLayer"
	GateEnableLegacyMetrics = "enableLegacyMetrics"
	GateFlowControl         = "flowControl"
	GatePrepareDataPlugins  = "prepareDataPlugins"
)

// DefaultScorerWeight is the weight of a scorer whose profile entry has none.
const DefaultScorerWeight = 1.0

// EndpointPickerConfig is the configuration file, in GIE v1.5's schema.
type EndpointPickerConfig struct {
	APIVersion         string                    `json:"apiVersion"`
	Kind               string                    `json:"kind"`
	FeatureGates       []string                  `json:"featureGates,omitempty"`
	Plugins            []PluginSpec              `json:"plugins"`
	SchedulingProfiles []SchedulingProfile       `json:"schedulingProfiles"`
	SaturationDetector *SaturationDetectorConfig `json:"saturationDetector,omitempty"`
	DataLayer          *DataLayerConfig          `json:"dataLayer,omitempty"`
	FlowControl        *FlowControlConfig        `json:"flowControl,omitempty"`
	Parser             *ParserConfig             `json:"parser,omitempty"`
	// FallbackChains maps a model to the ordered models a request for it
	// is scheduled for when admission refuses it retryably (see
	// fallback.go); Switchyard's own, not GIE's.
	FallbackChains map[string][]string `json:"fallbackChains,omitempty"`
	// PrefixRouting holds request-level prefix-routing settings (C-18);
	// Switchyard's own.
	PrefixRouting *PrefixRoutingConfig `json:"prefixRouting,omitempty"`
	// Availability is the multi-site availability block (availability.go);
	// nil means every default.
	Availability *learner.Settings `json:"availability,omitempty"`
}

// PluginSpec declares one plugin instance.
type PluginSpec struct {
	// Name defaults to Type.
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// SchedulingProfile is a named list of plugin references.
type SchedulingProfile struct {
	Name    string             `json:"name"`
	Plugins []SchedulingPlugin `json:"plugins"`
}

// SchedulingPlugin references a plugin from a profile. Weight applies to
// scorers only and defaults to 1.
type SchedulingPlugin struct {
	PluginRef string   `json:"pluginRef"`
	Weight    *float64 `json:"weight,omitempty"`
}

// SaturationDetectorConfig names the saturation detector plugin (v1.5).
// The inline thresholds are the v1.3/v1.4 form; when given without a
// pluginRef they configure a utilization-detector.
type SaturationDetectorConfig struct {
	PluginRef                 string   `json:"pluginRef,omitempty"`
	QueueDepthThreshold       *int     `json:"queueDepthThreshold,omitempty"`
	KVCacheUtilThreshold      *float64 `json:"kvCacheUtilThreshold,omitempty"`
	MetricsStalenessThreshold string   `json:"metricsStalenessThreshold,omitempty"`
}

// DataLayerConfig lists the data sources and their extractors. The key is
// `dataLayer` in v1.5 and `data` in v1.3/v1.4; both are read.
type DataLayerConfig struct {
	Sources []DataLayerSource `json:"sources"`
}

// DataLayerSource is one data source with its extractors.
type DataLayerSource struct {
	PluginRef  string               `json:"pluginRef"`
	Extractors []DataLayerExtractor `json:"extractors,omitempty"`
}

// DataLayerExtractor references an extractor plugin.
type DataLayerExtractor struct {
	PluginRef string `json:"pluginRef"`
}

// ParserConfig names the request parser plugin.
type ParserConfig struct {
	PluginRef string `json:"pluginRef"`
}

// FlowControlConfig is GIE v1.5's flow-control section, with llm-d's
// noEndpointRequestTTL and defaultNegativePriorityBand. Quantities are
// Kubernetes quantities ("10Gi", "5k"); durations are Go durations. It is
// read only with the flowControl feature gate (as in GIE); the effective
// configuration then shows every default.
type FlowControlConfig struct {
	// MaxBytes and MaxRequests bound all queued requests; empty or 0 means
	// no limit.
	MaxBytes    string `json:"maxBytes,omitempty"`
	MaxRequests string `json:"maxRequests,omitempty"`
	// DefaultRequestTTL bounds a request's wait while the pool has
	// endpoints; 0 (the default) means only the client's deadline.
	DefaultRequestTTL string `json:"defaultRequestTTL,omitempty"`
	// NoEndpointRequestTTL bounds the wait while the pool has no endpoint
	// (503 when spent); it defaults to DefaultRequestTTL (llm-d).
	NoEndpointRequestTTL string `json:"noEndpointRequestTTL,omitempty"`
	// DefaultPriorityBand is the template for priorities not listed.
	DefaultPriorityBand *PriorityBandConfig `json:"defaultPriorityBand,omitempty"`
	// DefaultNegativePriorityBand is the template for negative priorities
	// not listed (llm-d); without it sheddable requests are refused while
	// the pool is saturated, as in GIE.
	DefaultNegativePriorityBand *PriorityBandConfig  `json:"defaultNegativePriorityBand,omitempty"`
	PriorityBands               []PriorityBandConfig `json:"priorityBands,omitempty"`
	// UsageLimitPolicyPluginRef names the usage-limit policy; it defaults
	// to static-usage-limit-policy.
	UsageLimitPolicyPluginRef string `json:"usageLimitPolicyPluginRef,omitempty"`
}

// PriorityBandConfig is one flow-control priority band (or a band
// template, whose priority is ignored). MaxBytes defaults to 1G (GIE's
// 1,000,000,000 bytes; 0 also means the default), MaxRequests to no limit,
// the policies to global-strict-fairness-policy and fcfs-ordering-policy.
type PriorityBandConfig struct {
	Priority          int    `json:"priority"`
	MaxBytes          string `json:"maxBytes,omitempty"`
	MaxRequests       string `json:"maxRequests,omitempty"`
	FairnessPolicyRef string `json:"fairnessPolicyRef,omitempty"`
	OrderingPolicyRef string `json:"orderingPolicyRef,omitempty"`
}
