// Package extproc implements the endpoint-picker protocol: the Envoy
// ext_proc gRPC service (envoy.service.ext_proc.v3.ExternalProcessor) a
// gateway calls for every inference request, one bidirectional stream per
// HTTP request, with request and response bodies in FULL_DUPLEX_STREAMED
// mode.
//
// For each stream the Server
//
//   - remembers the request headers and holds its answer to them until the
//     whole body has arrived (routing needs the body); a request of a
//     bodyless method (GET, HEAD, OPTIONS, DELETE, TRACE) whose headers
//     carry end_of_stream is answered at once with an endpoint picked at
//     random; any other method (POST, PUT, PATCH, or none) with
//     end_of_stream on its headers is routed like any request, with an
//     empty body (the openai parser refuses it with 400; the passthrough
//     format schedules it, admission and profiles included);
//   - parses the body once (package requests), builds a scheduling.Request,
//     with Options.Sites (multi-site) first chooses its site (see
//     "Sites" below), then narrows the routable endpoints
//     (EndpointView.Routable: eligible — not failed by a health check,
//     circuit breaker not open — and fresh,
//     see package datastore; an endpoint out of rotation is never a
//     candidate) by the gateway's subset hint
//     (envoy.lb.subset_hint) and, with Options.ConformanceTestHeaders only,
//     the conformance header test-epp-endpoint-selection, and runs the
//     current configuration's Scheduler (producers, admission, profiles,
//     PreRequest hooks);
//   - with flow control (Runtime.Flow, the flowControl feature gate),
//     holds the complete request before that, in queue.go: it waits in
//     the FlowController in the band of its priority and its flow (the
//     fairness id header, else its model), its stream held and nothing
//     sent to the gateway, until the dispatcher releases it; 429
//     queue_full when it does not fit, 429 ttl_expired after its TTL, 429
//     saturated for a sheddable request, 503 no_endpoints, 503
//     flow_control_stopped at shutdown. A client that disconnects while
//     waiting (the stream's context ends) leaves the queue at once, is
//     never scheduled and gets no answer. While it waits, its counted size
//     (body capacity, prompt copies, headers and a per-request overhead)
//     counts against flow control's byte limits; its body leaves the buffer
//     budget below (which bounds bodies still arriving) only once it is
//     queued, so one dispatched at once or refused keeps counting there. Every request
//     completion notifies the FlowController (room may have appeared);
//     FlowRecorder receives the flow-control metrics;
//   - answers with the request-headers response (x-gateway-destination-endpoint
//     plus identical envoy.lb dynamic metadata, a comma-separated fallback
//     list when the picker returns several endpoints, Content-Length of the
//     possibly rewritten body: the model name, and with
//     Runtime.AnthropicCacheControlInjection the cache_control breakpoints
//     of a native Anthropic /v1/messages request, cachecontrol.go) and then
//     the body in streamed chunks of at most 62,000 bytes;
//   - on the response path reads the endpoint that served
//     (envoy.lb x-gateway-destination-endpoint-served), the status and the
//     token usage (JSON or SSE), rewrites the model name back to the one the
//     client asked for, and runs the response hooks;
//   - runs the ResponseComplete hooks exactly once per scheduled request: at
//     the end of the response, or when the stream ends early (client
//     disconnect, gateway error).
//
// # Tracing
//
// With Options.Tracer each stream is a trace (tracing.go; the span tree is
// in pkg/tracing's documentation): a child of the gateway's traceparent,
// and the parent of the upstream request, whose headers get the stream
// span's traceparent. Without a Tracer the request path is unchanged.
//
// # Sites
//
// With Options.Sites (pkg/multisite/sitestage), the site step (site.go)
// runs before the candidates and the profiles, once per request whose
// body is complete: the stage reads the learner's site snapshot and
// answers 400/404/429/503 (shed requests get Retry-After 3 … 7 s and an
// OpenAI rate_limit_exceeded/capacity_exhausted body) or a site. The
// local site is scheduled on the local pool exactly as without
// multi-site; a remote site's gateway address (host:port, from the
// topology) becomes the destination, the body is sent as the client
// sent it (the remote EPP parses, rewrites and schedules it), the
// request carries x-grid-origin-site set to this site, and nothing is
// scheduled or counted locally (its response passes through). Every
// routed response gets x-grid-site (the site) and x-grid-backend (its
// cluster, not the pod: the pod that served is in the gateway's served
// endpoint metadata, and a forwarded request's pod is the remote EPP's
// business). A request carrying x-grid-origin-site, or the gateway's
// subset hint (which names endpoints of the local pool, so a remote site
// cannot honour it), stays local without a draw, and is never forwarded.
// With the stage, saturation shedding of the local pool never refuses
// (scheduling.Request.SkipSaturationShedding): local saturation spills
// to other sites through the stage's tiers, and only the seed's shedding
// rule (a model shed by the learner) answers 429. Requests without body
// (GET /v1/models) are routed locally without the stage and named after
// the local site.
//
// Refusals are ImmediateResponses with an OpenAI-style JSON error body and
// an x-switchyard-reason header: 400 for a bad body or messages out of
// protocol order (request trailers without request headers or after the
// body ended, a response message before the request was forwarded, a
// response body or trailers before the response headers), 408 when the
// request does not arrive in time, 413 for a body above the limit, 429
// when shed, 503 when nothing is routable or the buffer budget is used up,
// 500 only for a bug. See errors.go (and queue.go for flow control's) for
// the closed set of reasons. Each refusal is logged once, in refuse: V(1)
// for 4xx, 429 and the 503s of load or of the request, V(0) (rate-limited)
// for 503 no_endpoints, an error for other 5xx.
//
// With Options.Decisions (decisions.go), every routed or refused request
// leaves one pkg/decisions Record: the scheduling explanation of its
// profile runs, the site stage's decision, its targets or refusal; and
// EmitEndpointScores puts the weighted total of every scored candidate of
// the primary run into the headers response's dynamic metadata
// (EndpointScoresKey).
//
// # Bounds
//
// What a client (or a gateway relaying one) can make the Server hold is
// bounded:
//
//   - a request body: Options.MaxRequestBodyBytes (413 above it);
//   - all bodies together: Options.MaxBufferedBytes, a process-wide budget
//     of the bytes streams hold while they wait for the rest of a body. A
//     request chunk that does not fit is refused with 503
//     buffer_budget_exhausted; a buffered response that does not fit is
//     passed through unread. The chunk that completes a body needs no
//     budget (it is handled at once), so small requests keep being served
//     while the budget is used up. The budget is one atomic counter;
//     switchyard_extproc_buffered_bytes and ..._limit export it;
//   - time: Options.RequestBodyTimeout, from the start of the stream to
//     the end of the request (408 body_timeout, and the stream ends, also
//     when nothing was received). Each stream is served by a goroutine of
//     its own that receives, handles and answers every message, while the
//     handler waits for it or for the deadline, so that the deadline can
//     interrupt a stalled client without a hand-off between goroutines
//     per message.
//
// The gRPC server's own limits (message size, streams per connection,
// keepalive) are set where it is built, in pkg/server.
//
// # Trusted headers
//
// These are every request header and metadata key the Server reads, what
// each changes, and whom it is trusted from. Every request header also
// reaches the plugins in scheduling.Request.Headers; a plugin's README
// says which it reads (session-affinity-scorer's session header, for
// example, is meant to come from clients). A key trusted from the gateway
// only must not be settable by clients: configure the gateway to remove
// client copies before the ext_proc filter runs, with Envoy's route or
// virtual host request_headers_to_remove, or a Gateway API HTTPRoute
// filter of type RequestHeaderModifier with "remove", and let the gateway
// set the values it means. GIE's EPP strips none of them either.
//
//   - x-gateway-model-name-rewrite: the model the request is sent to; the
//     body's "model" is rewritten to it before forwarding and responses
//     get the client's model name back. It decides which model (and so
//     which adapter and endpoints) serves. Gateway only: a client could
//     reach a model the route does not offer it.
//   - x-gateway-inference-objective: the InferenceObjective whose priority
//     the request gets (Options.Objective); a negative priority is
//     sheddable, and admission plugins decide by priority. Gateway only,
//     unless every objective of the pool is one any client may choose (a
//     client could otherwise raise its own priority).
//   - x-gateway-inference-fairness-id: the flow-control tenant key
//     (scheduling.Request.FairnessID, default default-flow; flow control's
//     flow, default the request's model). Gateway only: a tenant key
//     chosen by the client defeats fairness (a client could spread its
//     requests over many flows, or join another tenant's).
//   - x-request-id: the request's identity in logs and plugin hooks;
//     generated (and set on the forwarded request) when absent. Fine from
//     clients: it changes no routing.
//   - :method, and :path (or x-original-path, x-forwarded-path): the HTTP
//     method decides whether a request without body is a bodyless one,
//     the path which API the body is parsed as. Fine from clients: they
//     describe the request the client makes.
//   - metadata envoy.lb.subset_hint / x-gateway-destination-endpoint-subset:
//     restricts the candidate endpoints (503 when nothing matches), unless
//     --disable-endpoint-subset-filter. Gateway only. Clients cannot set
//     filter metadata, but a gateway that builds it from a request header
//     (header-to-metadata) must strip client copies of that header.
//   - metadata envoy.lb / x-gateway-destination-endpoint-served (response
//     path): the endpoint that served; the request's accounting moves to
//     it when it is one of the endpoints picked, and the response hooks
//     see it. Gateway only, and set by the gateway itself.
//   - test-epp-endpoint-selection: with Options.ConformanceTestHeaders
//     (--enable-conformance-test-headers, for GIE's conformance tests and
//     local experiments only) it restricts the candidates to the addresses
//     it lists, and an address matching nothing is a 503 that names the
//     header: any client can then choose its endpoint and probe which
//     endpoints exist. Without the option (the default) the Server ignores
//     it and removes it from the request forwarded upstream; the opt-in
//     header-based-testing-filter plugin, when a profile uses it, still
//     reads it from scheduling.Request.Headers (that plugin is for tests
//     only). Never trusted: strip it at the gateway in production.
//   - x-conformance-test-served-endpoint is a response header the Server
//     sets (to the served endpoint) only with
//     Options.ConformanceTestHeaders; it tells the client which endpoint
//     served.
//   - x-switchyard-fallback-model (FallbackModelHeader) is a response
//     header the Server sets when a retryable refusal (admission_reject,
//     model_not_found, model_unavailable) moved the request along its
//     model's fallback chain (Runtime.FallbackChains, the configuration's
//     fallbackChains, fallback.go): it names the model of the chain the
//     request was scheduled for. The body sent upstream names that model;
//     the response body gets the client's model name back, as for any
//     model rewrite, so this header is how a client learns it was served
//     by another model.
//   - x-grid-origin-site and x-grid-hops (multi-site only, Options.Sites):
//     set by the EPP of the site that forwarded the request (its site
//     name; "1"), replacing what the client sent. A request whose
//     x-grid-origin-site names a remote site of this EPP's topology, or
//     that carries x-grid-hops (a positive integer), is scheduled among
//     the local pods only and never forwarded again, so two sites cannot
//     bounce a request between them, even if a proxy on the way dropped
//     the origin header. Any other origin value (a forgery, this site's
//     own name) is ignored. A forged value can only keep a request on the
//     site it reached (the local pool), which the client could do anyway
//     by talking to that site: the stage's model checks, the 429 of a shed
//     model and the local saturation shedding all still apply, and it
//     cannot send a request elsewhere or raise its priority. What the
//     platform should strip at its client-facing edge (not between peer
//     gateways): both headers, so a client cannot bypass the site
//     stage's readiness, silence and tier checks for its own requests.
//     The headers are not authenticated; peer gateways are trusted by the
//     network path (see the README on mTLS between sites).
//   - x-grid-site and x-grid-backend are response headers the Server sets
//     with Options.Sites: the site and the cluster that served.
//
// Headers that plugins read, not the Server, are described in each
// plugin's README; one of them decides which endpoints a caller may use
// and so belongs here:
//
//   - x-switchyard-caller (the caller-scope-filter's callerHeader, this
//     name by default): the caller identity that selects the endpoints a
//     caller may reach (allowedEndpoints, internal endpoints for
//     internalCallers). Gateway only, set after authentication (from the
//     verified API key or token): a client that sets it could claim
//     another caller's scope, internal endpoints included. The gateway
//     must remove client copies and set its own.
//
// The request path does no network I/O and takes no global lock: the
// endpoint view and the runtime (scheduler and parser format) are read
// through functions that load atomically published snapshots.
//
// Imported by cmd/epp and tests; it imports the framework
// (pkg/scheduling), flow control's types (pkg/flowcontrol), the request
// parser (pkg/requests), the site stage (pkg/multisite/sitestage) and
// the error body encoder (pkg/internal/apierror), never a plugin; metrics
// come through the Recorder interface.
package extproc
