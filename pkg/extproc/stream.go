package extproc

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/requests"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// phase is where a stream is in the protocol.
type phase uint8

const (
	phaseStart        phase = iota // nothing received
	phaseRequestBody               // headers received, body accumulating
	phaseForwarded                 // header and body responses sent
	phaseResponse                  // response headers received
	phaseResponseDone              // response body complete
)

// logger is the stream's logger, with the request's ID once it is known.
// The ID is added on the first line written rather than when the request
// headers arrive: logr sinks (funcr, zap) format the values as they are
// added, which cost every request about 20 µs when most write no line.
func (st *stream) logger() logr.Logger {
	if !st.logWithID && st.reqID != "" {
		st.log, st.logWithID = st.log.WithValues("requestID", st.reqID), true
	}
	return st.log
}

// v is logger().V(level), without adding the request ID when the level is
// off (its lines are not written).
func (st *stream) v(level int) logr.Logger {
	if l := st.log.V(level); !l.Enabled() {
		return l
	}
	return st.logger().V(level)
}

// stream is the state of one ext_proc stream (one HTTP request). Its
// serving goroutine (serve, in server.go) uses it under mu; Process uses it once
// it has set over, or once serve has ended.
type stream struct {
	mu sync.Mutex
	// over: serve is done with the stream (it ended it, or Process took it
	// over at the body deadline). Guarded by mu.
	over bool

	s   *Server
	ctx context.Context
	// log is the server's logger until logger adds the request ID.
	log       logr.Logger
	logWithID bool

	phase   phase
	headers map[string]string
	// subset is the gateway's subset hint, from whichever request message
	// carried it last (Envoy may attach metadata to any of them).
	subset    []string
	hasSubset bool
	reqID     string
	genID     bool
	body      []byte
	start     time.Time
	// held is what this stream took from the Server's buffer budget: the
	// request body chunks it buffers, later the response chunks.
	held int64

	rt     *Runtime
	parsed requests.Parsed
	req    *scheduling.Request
	// fallbackModel is the model of the fallback chain the request was
	// scheduled for, "" when it was not moved (fallback.go).
	fallbackModel string
	targets       []*scheduling.Endpoint
	target        *scheduling.Endpoint // where the request is counted: the served endpoint once known
	stats         Stats
	tokens        int64

	forwardedAt time.Time
	firstByte   bool
	streaming   bool
	passthrough bool // the response is passed through unread: too large to buffer, or not scheduled
	respBody    []byte
	respBytes   int
	sse         requests.SSEScanner
	resp        scheduling.Response
	completed   bool
	running     bool

	site siteRoute     // the site step's choice (site.go), with Options.Sites
	dec  decisionState // the decision's record (decisions.go)
	tr   streamTrace   // tracing (tracing.go), with Options.Tracer
	// flowItem is the request's place in flow control (Runtime.Flow);
	// flow is the controller until Started was called.
	flowItem flowcontrol.Item
	flow     FlowController
}

func newStream(s *Server, ctx context.Context) *stream {
	st := &stream{s: s, ctx: ctx, log: s.log}
	st.traceBegin()
	return st
}

// handle processes one message and returns the responses to send, and
// whether the stream is over (an immediate response was sent).
func (st *stream) handle(msg *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, bool) {
	if st.phase < phaseForwarded {
		if hint, ok := subsetHint(msg); ok {
			st.subset, st.hasSubset = hint, true
		}
	}
	switch v := msg.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(msg, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(msg, v.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		// In FULL_DUPLEX_STREAMED mode the trailers, when the request has
		// them, end the body: its last chunk did not carry end_of_stream.
		if st.phase != phaseRequestBody {
			return st.protocolError("request trailers received before request headers or after the request ended")
		}
		return st.route(endTrailers)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		switch st.phase {
		case phaseStart:
			return st.protocolError("response headers received before the request headers")
		case phaseRequestBody:
			// A local reply of the proxy (a timeout or an error of its own
			// while the request was still arriving) runs through the
			// response path too: the request is abandoned, its body
			// let go, and the reply passed through unread.
			st.v(3).Info("The proxy answered the request itself before it was complete; passing its reply through")
			st.release()
			st.body = nil
			st.passthrough = true
		}
		return st.responseHeaders(msg, v.ResponseHeaders), false
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.phase < phaseResponse {
			return st.protocolError("response body received before response headers")
		}
		return st.responseBody(msg, v.ResponseBody), false
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if st.phase < phaseResponse {
			return st.protocolError("response trailers received before response headers")
		}
		return st.responseTrailers(msg), false
	default:
		st.v(4).Info("Ignoring an ext_proc message without a request phase")
		return nil, false
	}
}

// protocolError refuses a message that breaks the protocol's order.
func (st *stream) protocolError(message string) ([]*extprocv3.ProcessingResponse, bool) {
	return st.refuse(&refusal{status: http.StatusBadRequest, reason: ReasonProtocol, message: message})
}

// timedOut refuses a request that was not complete within the body
// deadline.
func (st *stream) timedOut() ([]*extprocv3.ProcessingResponse, bool) {
	return st.refuse(&refusal{status: http.StatusRequestTimeout, reason: ReasonBodyTimeout,
		message: "the request was not complete within " + st.s.opts.RequestBodyTimeout.String()})
}

// release gives back what the stream took from the buffer budget; it may
// be called any number of times.
func (st *stream) release() {
	st.s.budget.release(st.held)
	st.held = 0
}

// refuse answers the request itself and ends the stream.
func (st *stream) refuse(r *refusal) ([]*extprocv3.ProcessingResponse, bool) {
	st.body, st.respBody = nil, nil
	st.release()
	model, target := st.parsed.Model, st.targetModel()
	st.s.m.RequestError(model, target, errorCode(r.status))
	st.s.m.Refusal(r.reason)
	st.recordRefusal(r)
	st.traceRefusal(r)
	// One line per refusal (refusalLogLevel); the logger carries the
	// request id once the headers were read.
	st.logRefusal(r, model)
	return []*extprocv3.ProcessingResponse{r.immediate()}, true
}

func (st *stream) targetModel() string {
	if st.req != nil {
		return st.req.TargetModel
	}
	return st.parsed.Model
}

func (st *stream) requestHeaders(msg *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, bool) {
	if st.phase != phaseStart {
		return st.protocolError("request headers received twice")
	}
	st.start = st.s.now()
	hm := h.GetHeaders().GetHeaders()
	st.headers = make(map[string]string, len(hm))
	for _, hv := range hm {
		k := strings.ToLower(hv.GetKey())
		if len(hv.GetRawValue()) > 0 {
			st.headers[k] = string(hv.GetRawValue())
		} else {
			st.headers[k] = hv.GetValue()
		}
	}
	st.reqID = st.headers[RequestIDHeader]
	if st.reqID == "" {
		st.reqID = newRequestID()
		st.genID = true
	}
	st.traceStart()
	st.phase = phaseRequestBody
	if !h.GetEndOfStream() {
		return nil, false // the answer waits for the body
	}
	if bodyless(st.headers[":method"]) ||
		(st.s.opts.Runtime().format() != "passthrough" && requests.DetectAPI(st.path()) == requests.APIUnknown) {
		// No body by definition, or a call without body to an API that is
		// not an inference request (POST /v1/responses/{id}/cancel,
		// /reset_prefix_cache, /sleep): routed like a GET.
		return st.headerOnly()
	}
	// A method that carries a body (POST, PUT, PATCH, ...) or no method at
	// all: schedule it like any request, with an empty body, so that the
	// parser, admission and the profiles decide (GIE sends every such
	// request to a random endpoint, which would bypass them).
	return st.route(endHeaders)
}

// bodyless reports whether an HTTP method carries no request body by
// definition or by the convention of the APIs a model server offers (GET
// /v1/models, DELETE /v1/files/{id}).
func bodyless(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodDelete, http.MethodTrace:
		return true
	}
	return false
}

// headerOnly routes a request of a bodyless method without a body (e.g.
// GET /v1/models): no scheduling, a uniformly random ready endpoint,
// narrowed by the subset hint like any request.
func (st *stream) headerOnly() ([]*extprocv3.ProcessingResponse, bool) {
	cands, r := st.candidates()
	if r != nil {
		return st.refuse(r)
	}
	e := cands[rand.IntN(len(cands))]
	st.targets = []*scheduling.Endpoint{e}
	st.localSite()
	st.phase = phaseForwarded
	st.forwardedAt = st.s.now()
	st.v(3).Info("Routed a request without body", "endpoint", e.HostPort())
	return []*extprocv3.ProcessingResponse{st.headersResponse(0)}, false
}

func (st *stream) requestBody(msg *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, bool) {
	if st.phase != phaseRequestBody {
		return st.protocolError("request body received before request headers or after end of stream")
	}
	chunk, eos := b.GetBody(), b.GetEndOfStream()
	st.traceRequestChunk()
	if int64(len(st.body))+int64(len(chunk)) > st.s.opts.MaxRequestBodyBytes {
		return st.refuse(&refusal{status: http.StatusRequestEntityTooLarge, reason: ReasonBodyTooLarge,
			message: fmt.Sprintf("request body exceeds the limit of %d bytes", st.s.opts.MaxRequestBodyBytes)})
	}
	if !eos && len(chunk) > 0 {
		// The stream will hold this chunk while it waits for the rest.
		if !st.s.budget.acquire(int64(len(chunk)), st.held) {
			return st.refuse(&refusal{status: http.StatusServiceUnavailable, reason: ReasonBufferExhausted,
				message: "the endpoint picker holds as many buffered request bytes as it may; retry later"})
		}
		st.held += int64(len(chunk))
	}
	if st.body == nil && eos {
		// One chunk: keep the message's buffer, no copy.
		st.body = chunk
	} else {
		st.body = append(st.body, chunk...)
	}
	if !eos {
		return nil, false
	}
	return st.route(endBody)
}

// bodyEnd is what completed a request.
type bodyEnd uint8

const (
	endBody     bodyEnd = iota // a body chunk with end_of_stream
	endTrailers                // the request trailers: the last chunk did not end the stream
	endHeaders                 // end_of_stream on the headers: there is no body at all
)

// path is the request's path, as the proxy gave it.
func (st *stream) path() string {
	if p := st.headers[":path"]; p != "" {
		return p
	}
	if p := st.headers["x-original-path"]; p != "" {
		return p
	}
	return st.headers["x-forwarded-path"]
}

func (st *stream) responseHeaders(msg *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) []*extprocv3.ProcessingResponse {
	st.phase = phaseResponse
	span := st.enter(tracing.SpanResponseHeaders)
	hm := h.GetHeaders().GetHeaders()
	st.resp.Headers = make(map[string]string, len(hm))
	for _, hv := range hm {
		k := strings.ToLower(hv.GetKey())
		v := hv.GetValue()
		if len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		st.resp.Headers[k] = v
		switch k {
		case ":status", "status":
			if code, err := strconv.Atoi(v); err == nil {
				st.resp.StatusCode = code
			}
		case "content-type":
			if strings.Contains(v, "text/event-stream") {
				st.streaming = true
			}
		}
	}
	if st.parsed.Stream {
		st.streaming = true
	}
	var set []*corev3.HeaderValueOption
	if served := servedEndpoint(msg); served != "" {
		st.setServed(served)
		if st.s.opts.ConformanceTestHeaders {
			set = append(set, headerOption(ConformanceServed, served))
		}
	}
	set = st.appendFallbackHeader(set)
	if st.req != nil {
		st.rt.Scheduler.ResponseReceived(st.ctx, st.req, &st.resp, st.target)
	}
	set = st.siteResponseHeaders(set)
	st.exit(span)
	out := []*extprocv3.ProcessingResponse{{
		Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}},
			},
		},
	}}
	if h.GetEndOfStream() {
		st.phase = phaseResponseDone
		st.complete(false)
	}
	return out
}

// setServed records the endpoint that served. When the gateway fell back
// to another endpoint of the list, the accounting moves there.
func (st *stream) setServed(served string) {
	if st.resp.Served == served {
		return
	}
	st.resp.Served = served
	if st.req == nil || st.completed {
		// Not scheduled (a request without body) or already accounted for.
		return
	}
	for _, e := range st.targets {
		if e.HostPort() != served || e == st.target {
			continue
		}
		if st.stats != nil {
			st.stats.Finish(st.tokens, 0, false)
		}
		st.target = e
		st.stats = nil
		if st.s.opts.Stats != nil {
			st.stats = st.s.opts.Stats(e)
		}
		if st.stats != nil {
			st.stats.Start(st.tokens)
		}
		return
	}
}

func (st *stream) responseBody(msg *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) []*extprocv3.ProcessingResponse {
	if served := servedEndpoint(msg); served != "" {
		st.setServed(served)
	}
	chunk, eos := b.GetBody(), b.GetEndOfStream()
	st.traceResponseChunk()
	st.respBytes += len(chunk)
	// Time to first token is only meaningful when the response streams;
	// a buffered JSON response's first byte comes with its last token.
	if !st.firstByte && len(chunk) > 0 && st.req != nil && st.streaming && st.resp.StatusCode >= 200 && st.resp.StatusCode < 300 {
		st.firstByte = true
		ttft := st.s.now().Sub(st.forwardedAt)
		if st.stats != nil {
			st.stats.FirstToken(ttft)
		}
		st.s.m.TTFT(st.req.Model, st.req.TargetModel, ttft)
	}
	if st.req == nil {
		// Nothing reads an unscheduled response (a request without body):
		// pass it through as it comes.
		st.passthrough = true
	}
	if st.streaming || st.passthrough {
		if st.req != nil {
			if st.streaming && st.rt.format() != "passthrough" {
				st.sse.Feed(chunk)
			}
			st.rt.Scheduler.ResponseStreaming(st.ctx, st.req, &st.resp, chunk, st.target)
		}
		chunk = st.rewriteModel(chunk)
		out := appendBodyChunks(nil, chunk, eos, responseBodyResponse)
		if eos {
			st.phase = phaseResponseDone
			st.complete(false)
		}
		return out
	}
	tooLarge := int64(len(st.respBody))+int64(len(chunk)) > st.s.opts.MaxBufferedResponseBytes
	noBudget := false
	if !tooLarge && !eos && len(chunk) > 0 {
		// The stream will hold this chunk until the response ends.
		if st.s.budget.acquire(int64(len(chunk)), st.held) {
			st.held += int64(len(chunk))
		} else {
			noBudget = true
		}
	}
	if tooLarge || noBudget {
		// Too large to buffer, or the budget is used up: pass it through
		// without usage.
		st.passthrough = true
		if tooLarge {
			st.v(2).Info("Response too large to buffer; passing it through without reading usage", "bytes", len(st.respBody)+len(chunk))
		} else {
			st.v(2).Info("Buffer budget used up; passing the response through without reading usage", "bytes", len(st.respBody)+len(chunk))
		}
		all := append(st.respBody, chunk...)
		st.respBody = nil
		st.release()
		out := appendBodyChunks(nil, st.rewriteModel(all), eos, responseBodyResponse)
		if eos {
			st.phase = phaseResponseDone
			st.complete(false)
		}
		return out
	}
	if st.respBody == nil && eos {
		st.respBody = chunk // one chunk: no copy
	} else {
		st.respBody = append(st.respBody, chunk...)
	}
	if !eos {
		return nil
	}
	return st.finishBuffered(true)
}

// finishBuffered ends a buffered response: usage, hooks, model rewrite,
// the body back in chunks.
func (st *stream) finishBuffered(eos bool) []*extprocv3.ProcessingResponse {
	body := st.respBody
	st.respBody = nil
	st.release()
	if st.req != nil && st.rt.format() != "passthrough" {
		if u, ok := requests.ParseUsage(body); ok {
			st.resp.Usage = u
		}
	}
	if st.req != nil {
		st.rt.Scheduler.ResponseStreaming(st.ctx, st.req, &st.resp, body, st.target)
	}
	st.phase = phaseResponseDone
	st.complete(false)
	return appendBodyChunks(nil, st.rewriteModel(body), eos, responseBodyResponse)
}

func (st *stream) responseTrailers(msg *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	if served := servedEndpoint(msg); served != "" {
		st.setServed(served)
	}
	var out []*extprocv3.ProcessingResponse
	if st.phase != phaseResponseDone {
		if !st.streaming && !st.passthrough && len(st.respBody) > 0 {
			out = st.finishBuffered(false)
		} else {
			st.phase = phaseResponseDone
			st.complete(false)
		}
	}
	return append(out, &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}},
	})
}

// rewriteModel gives a response chunk the client's model name back.
func (st *stream) rewriteModel(chunk []byte) []byte {
	if st.req == nil || st.req.TargetModel == st.req.Model || st.req.Model == "" {
		return chunk
	}
	return requests.RewriteResponseModel(chunk, st.req.TargetModel, st.req.Model)
}

// complete runs the completion of a scheduled request once: hooks,
// endpoint accounting and metrics. A request that has no target was never
// scheduled (the stream ended while it was being scheduled, by a panic of
// a plugin, say): it has nothing to complete.
func (st *stream) complete(disconnected bool) {
	if st.req == nil || st.target == nil || st.completed {
		return
	}
	st.completed = true
	defer st.exit(st.enter(tracing.SpanResponseComplete))
	if st.streaming && !st.passthrough {
		if u, ok := st.sse.Usage(); ok {
			st.resp.Usage = u
		}
	}
	st.resp.EndOfStream = !disconnected
	st.resp.Disconnected = disconnected
	ctx := st.ctx
	if disconnected {
		ctx = context.WithoutCancel(ctx)
	}
	st.rt.Scheduler.ResponseComplete(ctx, st.req, &st.resp, st.target)
	if st.rt.Flow != nil {
		st.rt.Flow.Notify() // its room is free
	}
	e2e := st.s.now().Sub(st.forwardedAt)
	ok := !disconnected && st.resp.StatusCode >= 200 && st.resp.StatusCode < 300
	if st.stats != nil {
		st.stats.Finish(st.tokens, e2e, ok)
	}
	if st.running {
		st.running = false
		st.s.m.RunningRequests(st.req.Model, -1)
	}
	model, target := st.req.Model, st.req.TargetModel
	if disconnected {
		st.v(3).Info("Request ended before its response completed", "endpoint", st.target.HostPort())
		return
	}
	if !ok {
		st.s.m.RequestError(model, target, "ModelServerError")
	}
	st.s.m.RequestDuration(model, target, st.s.now().Sub(st.start))
	st.s.m.ResponseSize(model, target, st.respBytes)
	u := st.resp.Usage
	if u.PromptTokens > 0 || u.CompletionTokens > 0 {
		st.s.m.Tokens(model, target, u.PromptTokens, u.CompletionTokens, u.CachedTokens)
		if u.CompletionTokens > 0 {
			st.s.m.NormalizedTPOT(model, target, e2e, u.CompletionTokens)
		}
	}
	st.v(3).Info("Request completed", "endpoint", st.target.HostPort(), "status", st.resp.StatusCode,
		"promptTokens", u.PromptTokens, "completionTokens", u.CompletionTokens, "e2e", e2e)
}

// finish runs when the stream ends for any reason.
func (st *stream) finish() {
	st.flowStarted()
	st.release()
	if st.req != nil && !st.completed {
		st.complete(true)
	}
	st.traceEnd()
}

func newRequestID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
