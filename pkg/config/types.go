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

// FlowControlConfig is GIE's flow-control section. Quantities are
// Kubernetes quantities ("10Gi", "5k"); durations are Go durations.
type FlowControlConfig struct {
	MaxBytes                  string               `json:"maxBytes,omitempty"`
	MaxRequests               string               `json:"maxRequests,omitempty"`
	DefaultRequestTTL         string               `json:"defaultRequestTTL,omitempty"`
	DefaultPriorityBand       *PriorityBandConfig  `json:"defaultPriorityBand,omitempty"`
	PriorityBands             []PriorityBandConfig `json:"priorityBands,omitempty"`
	UsageLimitPolicyPluginRef string               `json:"usageLimitPolicyPluginRef,omitempty"`
}

// PriorityBandConfig is one flow-control priority band.
type PriorityBandConfig struct {
	Priority          int    `json:"priority"`
	MaxBytes          string `json:"maxBytes,omitempty"`
	MaxRequests       string `json:"maxRequests,omitempty"`
	FairnessPolicyRef string `json:"fairnessPolicyRef,omitempty"`
	OrderingPolicyRef string `json:"orderingPolicyRef,omitempty"`
}
