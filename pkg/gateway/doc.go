// Package gateway is a small HTTP data plane that plays Envoy's part in front of
// an endpoint picker (EPP). It speaks Envoy's ext_proc protocol
// (envoy.service.ext_proc.v3.ExternalProcessor/Process) to the EPP exactly as an
// Envoy ext_proc filter configured like the Gateway API Inference Extension
// reference config does:
//
//	processing_mode:
//	  request_header_mode: SEND        response_header_mode: SEND
//	  request_body_mode: FULL_DUPLEX_STREAMED
//	  response_body_mode: FULL_DUPLEX_STREAMED
//	  request_trailer_mode: SEND       response_trailer_mode: SEND
//	failure_mode_allow: false          (FailClose)
//	status_on_error: 503
//
// and routes like Envoy's ORIGINAL_DST cluster with
// original_dst_lb_config.use_http_header, walking the EPP's comma-separated
// fallback list on connect failures only (retry_on: connect-failure).
//
// It exists so that the demo, the end-to-end tests and the benchmarks of
// Switchyard run without an Envoy binary. It is not a general-purpose proxy:
// no TLS termination, no WebSocket upgrades, no HTTP/2 to upstreams.
//
// # Per-request flow
//
// One ext_proc stream is opened per HTTP request. Streams share the gateway's
// gRPC connections to the EPP: a stream goes on the first connection holding
// fewer than StreamsPerConnection (default 100) streams, and when all hold
// that many another connection is dialed, as Envoy's HTTP/2 pool does when a
// connection reaches the server's SETTINGS_MAX_CONCURRENT_STREAMS (grpc-go on
// its own would make the stream wait for a free slot). Connections stay open
// until Close; switchyard_gateway_epp_connections counts them.
// The gateway sends, in order:
//
//  1. request_headers (with protocol_config on this first message): the
//     pseudo-headers :authority, :path, :method, :scheme first, then the
//     client's headers in lower case and sorted by name, each value in
//     raw_value. Hop-by-hop headers and Expect are dropped (Envoy's HTTP
//     connection manager drops them before filters run); x-forwarded-for
//     (client address appended) and x-forwarded-proto are set as with
//     use_remote_address: true, and x-request-id is added (a random UUIDv4) when
//     the client sent none. end_of_stream is true when the request has no body.
//  2. request_body chunks as they are read from the client, without waiting
//     for answers (full duplex); the last one has end_of_stream (an empty
//     chunk when the end is only known after the last data). Request trailers,
//     if the client sent any, follow as request_trailers instead of an
//     end_of_stream body chunk.
//  3. After the upstream answered: response_headers (:status first, then the
//     upstream's headers), response_body chunks as the upstream body arrives
//     (end_of_stream on the last), and response_trailers when the upstream sent
//     trailers. Envoy sends only the :status pseudo-header, never a plain
//     "status" header, and so does the gateway.
//
// Every message carries metadata_context: the subset hint
// (filter_metadata["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"],
// a list of strings) when Options.SubsetHeader is set and the request carries
// that header, and on response-phase messages
// filter_metadata["envoy.lb"]["x-gateway-destination-endpoint-served"] = the
// ip:port that actually served the request.
//
// The EPP's answers are applied as Envoy applies them: header mutations
// (set_headers with append / append_action semantics, remove_headers; changes
// to :method, :authority, :scheme, host and x-envoy-* are ignored, removal of
// pseudo-headers and host is ignored), request_body / response_body
// streamed_response chunks concatenated (request) or written and flushed to
// the client one by one (response; SSE streams through chunk by chunk), and
// immediate_response written verbatim at any point before the response
// headers reached the client.
//
// The destination is dynamic_metadata["envoy.lb"]["x-gateway-destination-endpoint"]
// when present, else the x-gateway-destination-endpoint request header after
// mutation: a comma-separated list of literal ip:port entries (IPv6 in
// brackets; host names are not resolved, as with ORIGINAL_DST), primary first.
// The upstream request carries the mutated headers (the destination header
// included, as Envoy forwards it) and the mutated body with Content-Length set
// to its length; request trailers go to the EPP but not upstream. Go's
// transport adds neither User-Agent nor Accept-Encoding. The client response
// loses the upstream Content-Length (the EPP may change the body; it is sent
// chunked) unless the EPP sets one.
//
// If the EPP ends its stream with an OK status after routing and before the
// response phase started, the gateway, like Envoy, stops processing and passes
// the upstream response through unmodified. An OK end of the stream in the
// middle of the response phase is a failure.
//
// # Errors (FailClose)
//
// Replies generated by the gateway itself carry an OpenAI-style JSON error body
// and an x-switchyard-reason header:
//
//	413 request_too_large         body larger than Options.MaxRequestBodyBytes (upstream not called)
//	408 request_timeout           the body did not arrive within Options.BodyReadTimeout
//	503 overloaded                Options.MaxConcurrentRequests requests in flight (with Retry-After: 1)
//	503 epp_unavailable           the ext_proc stream could not be opened or failed (gRPC error,
//	                              stream ended) before the response headers reached the client
//	503 epp_timeout               no answer within Options.MessageTimeout
//	503 epp_protocol_error        the EPP broke the protocol (unexpected or malformed message)
//	503 no_route                  the EPP named no valid destination
//	503 upstream_connect_failure  every endpoint of the list refused or timed out the connection
//	503 upstream_reset            the upstream failed after the request was sent (never retried)
//	504 upstream_timeout          no response headers within Options.UpstreamHeaderTimeout, or no
//	                              body data for Options.UpstreamIdleTimeout before headers reached the client
//	400 bad_request               the client's body could not be read
//
// Envoy answers ext_proc failures with 500 (504 for a message timeout) unless
// status_on_error is configured; the gateway behaves as if status_on_error were
// 503, which is what GIE's FailClose documentation describes. The no_route,
// upstream_* replies are local replies of the router, so (as in Envoy) they
// still pass through the EPP's response path when the stream is alive, and so
// does a 504 for missing response headers. Once response headers were sent to
// the client, a failure aborts the connection (http.ErrAbortHandler), as Envoy
// resets the downstream stream. After an upstream failure or timeout the
// ext_proc stream is half-closed without end_of_stream on the response body,
// so the EPP learns the response is over.
//
// # Bounds
//
// Whatever a client or an upstream does, what it holds in the gateway (a
// handler goroutine, an ext_proc stream and the body the EPP buffered for it)
// is bounded in time and number. Zero values in Options mean the defaults.
//
//	ReadHeaderTimeout      10 s     request line and headers (http.Server, see NewHTTPServer)
//	MaxHeaderBytes         64 KiB   request header block; net/http answers 431 above it
//	BodyReadTimeout        60 s     from the start of the request to the last body byte: 408,
//	                                ext_proc stream cancelled; enforced with the connection's read
//	                                deadline, so a steady upload that ends in time is unaffected
//	MaxRequestBodyBytes    64 MiB   413
//	MaxConcurrentRequests  10000    requests in flight, hence open ext_proc streams: 503 above
//	StreamsPerConnection   100      ext_proc streams per gRPC connection to the EPP, so at most
//	                                ⌈MaxConcurrentRequests/StreamsPerConnection⌉ connections
//	MessageTimeout         30 s     each wait for the EPP: 503 epp_timeout
//	UpstreamHeaderTimeout  10 min   from the first upstream attempt (connects and the fallback
//	                                walk included) to the response headers: 504. Long on purpose:
//	                                a non-streaming completion sends its headers only when done
//	UpstreamIdleTimeout    5 min    longest wait for the next piece of the upstream body: the
//	                                response is cut (504 before the client saw headers, an aborted
//	                                connection after)
//	connect timeout        2 s      per endpoint, default transport (DefaultConnectTimeout)
//	IdleTimeout            120 s    keep-alive connections between requests (NewHTTPServer)
//
// There is no bound on how slowly a client reads its response (no
// WriteTimeout: SSE streams may last long); such a client holds one of the
// MaxConcurrentRequests slots. Timeouts are counted in
// switchyard_gateway_timeouts_total{kind} (body_read, upstream_headers,
// upstream_idle), refusals in switchyard_gateway_concurrency_rejections_total
// and the requests being handled in switchyard_gateway_requests_in_flight.
//
// # Concurrency
//
// Each request owns exactly one extra goroutine, the ext_proc stream reader,
// which is stopped (context cancellation) and awaited before ServeHTTP returns.
// A client disconnect cancels the upstream request and the ext_proc stream, so
// the EPP sees its stream end and can run its completion hooks.
//
// Who may import it: commands (cmd/...), end-to-end tests and benchmarks. The
// EPP packages must not import it.
package gateway
