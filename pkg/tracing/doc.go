// Package tracing is Switchyard's OpenTelemetry tracing: the tracer
// provider built from --tracing and the OTEL_* environment variables
// (FromEnv, New), and the helpers the request path starts its spans with
// (Tracer.StartRequest, Start, Tracer.Inject).
//
// # Who imports it
//
// cmd/epp reads the configuration (FromEnv); pkg/server builds the
// Provider and owns it; pkg/extproc starts a request's spans and injects
// the W3C trace context into the upstream request headers;
// pkg/scheduling starts the spans of scheduling, profiles and plugin
// runs. Plugins may call Start too. tracingtest, an in-process OTLP
// collector, is for tests only.
//
// # Goroutines
//
// A Provider's batch span processors export on goroutines of the
// OpenTelemetry SDK, from New until Shutdown; the owner (the server's Run)
// calls Shutdown once, after the last stream ended, to flush the queued
// spans within a bounded time. The request path never waits for an
// export: ended spans go into a bounded queue (2048 spans by default),
// and when it is full they are dropped.
//
// # Cost
//
// Off (a nil *Tracer) or not sampled, Start returns the context as it is
// and a zero-size no-op span: no allocation, no lock. Callers build
// attributes only when span.IsRecording().
//
// # Bounds and trust
//
// String attribute values are cut to DefaultAttributeValueLengthLimit
// bytes (OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT): the model comes from the
// request body. The parent-based samplers follow an incoming traceparent's
// sampled flag, so a client reaching the EPP through a gateway that passes
// the header on can force sampling; Config.IgnoreRemoteSampled
// (SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED) lets the ratio decide.
//
// # Spans of one request
//
//	gateway.request                  the ext_proc stream (server span; child of the gateway's traceparent)
//	  gateway.request_headers        from the stream's start to the request headers
//	  gateway.request_body           first to last request body chunk
//	  gateway.request_orchestration  from the complete body to the answer (GIE's name; request_prio)
//	    gateway.site_stage           multi-site: tier, path, reason, site
//	    gateway.flow_control         waiting in the flow-control queue (switchyard.flow.outcome)
//	    scheduling.process           one scheduling attempt (a fallback model is another)
//	      <point> <plugin name>      each data producer, admitter, profile handler run and pre-request hook
//	      scheduling.profile         one profile run
//	        <point> <plugin name>    each filter, scorer and picker ("Scorer queue-scorer")
//	  gateway.response_headers       the response headers
//	    <point> <plugin name>        each response-received hook
//	  gateway.response_body          first to last response body chunk
//	  gateway.response_complete      completion
//	    <point> <plugin name>        each response-complete hook
//
// The points are those of inference_extension_plugin_duration_seconds
// (Filter, Scorer, Picker, PrepareData, Admission, ProfilePicker,
// ProcessProfilesResults, PreRequest, ResponseReceived,
// ResponseComplete); response-streaming hooks run per chunk and get no
// span. Plugin spans carry switchyard.extension_point,
// switchyard.plugin.type and switchyard.plugin.name. The upstream request
// carries the gateway.request span's context in traceparent.
package tracing
