package tracing

import "go.opentelemetry.io/otel/trace"

// Span names of the request path (see the package documentation). GIE's
// names where GIE has the span.
const (
	SpanRequest              = "gateway.request"
	SpanRequestHeaders       = "gateway.request_headers"
	SpanRequestBody          = "gateway.request_body"
	SpanRequestOrchestration = "gateway.request_orchestration"
	SpanSiteStage            = "gateway.site_stage"
	SpanFlowControl          = "gateway.flow_control"
	SpanResponseHeaders      = "gateway.response_headers"
	SpanResponseBody         = "gateway.response_body"
	SpanResponseComplete     = "gateway.response_complete"
	SpanSchedule             = "scheduling.process"
	SpanProfile              = "scheduling.profile"
	// A plugin run's span is named "<extension point> <plugin name>",
	// e.g. "Scorer queue-scorer" (the points of
	// inference_extension_plugin_duration_seconds).
)

// Attribute keys. GIE's target_model and request_prio where GIE has them.
const (
	AttrRequestID     = "switchyard.request_id"
	AttrModel         = "gen_ai.request.model"
	AttrTargetModel   = "target_model"
	AttrPriority      = "request_prio"
	AttrEndpoint      = "switchyard.endpoint" // the chosen endpoints, primary first, comma-separated
	AttrProfile       = "switchyard.profile"
	AttrCandidates    = "switchyard.candidates"
	AttrEndpointsOut  = "switchyard.endpoints_left" // endpoints a filter kept
	AttrRefusalReason = "switchyard.refusal.reason"
	AttrStatusCode    = "http.response.status_code"
	AttrPoint         = "switchyard.extension_point"
	AttrPluginType    = "switchyard.plugin.type"
	AttrPluginName    = "switchyard.plugin.name"
	AttrSite          = "switchyard.site"
	AttrSiteTier      = "switchyard.site.tier"
	AttrSitePath      = "switchyard.site.path"
	AttrSiteReason    = "switchyard.site.reason"
	AttrSiteRemote    = "switchyard.site.remote" // the remote site's gateway, when forwarded
	AttrFlowOutcome   = "switchyard.flow.outcome"
	AttrFallbackModel = "switchyard.fallback_model"
	AttrResponseBytes = "switchyard.response.bytes"
	AttrDisconnected  = "switchyard.disconnected"
	AttrPromptTokens  = "gen_ai.usage.input_tokens"
	AttrOutputTokens  = "gen_ai.usage.output_tokens"
)

// Noop returns the span that records nothing (what Start returns when
// nothing is traced).
func Noop() trace.Span { return noopSpan }
