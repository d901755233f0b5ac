// Package extproc implements the endpoint-picker protocol: the Envoy
// ext_proc gRPC service (envoy.service.ext_proc.v3.ExternalProcessor) a
// gateway calls for every inference request, one bidirectional stream per
// HTTP request, with request and response bodies in FULL_DUPLEX_STREAMED
// mode.
//
// For each stream the Server
//
//   - remembers the request headers and holds its answer to them until the
//     whole body has arrived (routing needs the body); a request without a
//     body (end_of_stream on the headers) is answered at once with an
//     endpoint picked at random;
//   - parses the body once (package requests), builds a scheduling.Request,
//     narrows the ready endpoints by the gateway's subset hint
//     (envoy.lb.subset_hint) and the conformance header
//     test-epp-endpoint-selection, and runs the current configuration's
//     Scheduler (producers, admission, profiles, PreRequest hooks);
//   - answers with the request-headers response (x-gateway-destination-endpoint
//     plus identical envoy.lb dynamic metadata, a comma-separated fallback
//     list when the picker returns several endpoints, Content-Length of the
//     possibly rewritten body) and then the body in streamed chunks of at
//     most 62,000 bytes;
//   - on the response path reads the endpoint that served
//     (envoy.lb x-gateway-destination-endpoint-served), the status and the
//     token usage (JSON or SSE), rewrites the model name back to the one the
//     client asked for, and runs the response hooks;
//   - runs the ResponseComplete hooks exactly once per scheduled request: at
//     the end of the response, or when the stream ends early (client
//     disconnect, gateway error).
//
// Refusals are ImmediateResponses with an OpenAI-style JSON error body and
// an x-switchyard-reason header: 400 for a bad body, 413 for a body above
// the limit, 429 when shed, 503 when nothing is routable, 500 only for a
// bug. See errors.go for the closed set of reasons.
//
// The request path does no network I/O and takes no global lock: the
// endpoint view and the runtime (scheduler and parser format) are read
// through functions that load atomically published snapshots.
//
// Imported by cmd/epp and tests; it imports the framework
// (pkg/scheduling), the request parser (pkg/requests), the metrics
// (pkg/metrics) and the error body encoder (pkg/internal/apierror), never a
// plugin.
package extproc
