package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Phases of an exchange, as seen by the stream reader.
const (
	phaseRequest int32 = iota
	phaseResponse
)

// What the upstream timer of an exchange is measuring.
const (
	upWaitNone    int32 = iota
	upWaitHeaders       // Options.UpstreamHeaderTimeout
	upWaitIdle          // Options.UpstreamIdleTimeout
)

// failure says why an exchange failed on the EPP side (or on the client side).
type failure struct {
	kind   string // extProcUnavailable, extProcTimeout, extProcProtocol; "" = client write failure
	reason string // Reason*
	err    error
}

func (f *failure) reply() localReply {
	return localReply{status: http.StatusServiceUnavailable, reason: f.reason, message: "endpoint picker: " + f.err.Error()}
}

func protocolError(format string, args ...any) *failure {
	return &failure{kind: extProcProtocol, reason: ReasonEPPProtocolError, err: fmt.Errorf("protocol error: "+format, args...)}
}

// responseState is what the reader needs to answer the client once the
// response phase started. Main builds it, publishes it through exchange.resp
// and never touches it again.
type responseState struct {
	status int
	header http.Header
	noBody bool
	source string // metrics source if the reply completes
}

// exchange is the state of one HTTP request. Two goroutines share it: the
// handler goroutine ("main": reads the client and the upstream, sends to the
// EPP) and the stream reader (receives from the EPP). Ownership:
//   - request-phase fields below "reader-owned, request phase" are written by
//     the reader and read by main only after decided is closed;
//   - the client ResponseWriter is used by main before the response phase
//     starts or after done is closed, and by the reader only during the
//     response phase;
//   - fields below "reader-owned, outcome" are read by main after done.
type exchange struct {
	g *Gateway
	r *http.Request
	w http.ResponseWriter

	ctx      context.Context // the ext_proc stream's context
	cancel   context.CancelFunc
	upCtx    context.Context // the upstream request's context (child of ctx)
	upCancel context.CancelFunc
	stream   extprocv3.ExternalProcessor_ProcessClient
	sendErr  error // main only: first Send error

	reqID  string           // x-request-id as sent to the EPP
	noBody bool             // set before the reader starts
	subset *structpb.Struct // subset hint, nil = none

	decided chan struct{} // closed by the reader: routing decided, immediate response, or failure
	done    chan struct{} // closed when the reader exits

	phase           atomic.Int32
	resp            atomic.Pointer[responseState]
	trailers        atomic.Pointer[http.Header] // upstream trailers sent to the EPP
	sentReqTrailers atomic.Bool
	lateImmediate   atomic.Pointer[extprocv3.ImmediateResponse]

	// Request body deadline (main only, except bodyTimer's callback).
	bodyDeadline bool        // the connection's read deadline is set
	bodyTimer    *time.Timer // fallback when the deadline cannot be set; cancels ctx
	bodyTimedOut atomic.Bool // set by bodyTimer

	// upTimer is one timer for the upstream bounds: armed for the response
	// headers, then around each read of the response body. Its callback
	// records what it was measuring and cancels upCtx.
	upTimer    *time.Timer
	upWaiting  atomic.Int32 // upWait*: what the armed timer measures
	upTimedOut atomic.Int32 // upWait* at the time it fired; upWaitNone = never

	// reader-owned, request phase (published by close(decided))
	isDecided     bool
	decisionFail  *failure
	gotReqHeaders bool
	reqMutation   *extprocv3.HeaderMutation
	reqBody       []byte
	reqBodyEOS    bool
	gotReqTrail   bool
	dest          string
	destSet       bool
	immediate     *extprocv3.ImmediateResponse

	// reader-owned, response phase / outcome (published by close(done))
	fail           *failure
	cleanEOF       bool
	respGotHeaders bool
	respBodyEOS    bool
	respWritten    bool // headers were written to the client
	respComplete   bool
	status         int
	source         string
}

// ServeHTTP forwards r through the EPP to the endpoint it picks. See the
// package documentation for the protocol and the error replies.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > g.maxBody {
		g.directReply(w, localReply{status: http.StatusRequestEntityTooLarge, reason: ReasonRequestTooLarge,
			message: fmt.Sprintf("request body of %d bytes exceeds the gateway limit of %d bytes", r.ContentLength, g.maxBody)})
		return
	}
	if g.inFlight.Add(1) > g.maxInFlight {
		g.inFlight.Add(-1)
		g.metrics.rejected.Inc()
		w.Header().Set("Retry-After", "1")
		g.directReply(w, localReply{status: http.StatusServiceUnavailable, reason: ReasonOverloaded,
			message: fmt.Sprintf("the gateway is handling its maximum of %d concurrent requests; retry later", g.maxInFlight)})
		return
	}
	g.metrics.inFlight.Inc()
	defer g.release()
	x := &exchange{g: g, r: r, w: w}
	x.ctx, x.cancel = context.WithCancel(r.Context())
	defer x.cancel()
	x.upCtx, x.upCancel = context.WithCancel(x.ctx)
	x.run()
}

func (g *Gateway) release() {
	g.inFlight.Add(-1)
	g.metrics.inFlight.Dec()
}

func (g *Gateway) directReply(w http.ResponseWriter, l localReply) {
	l.writeDirect(w)
	g.metrics.request(l.status, sourceGateway)
}

func (x *exchange) clientGone() bool { return x.r.Context().Err() != nil }

func (x *exchange) send(m *extprocv3.ProcessingRequest) bool {
	if x.sendErr != nil {
		return false
	}
	if err := x.stream.Send(m); err != nil {
		x.sendErr = err
		return false
	}
	return true
}

// run drives one request. It starts the stream reader and does not return
// before the reader exited.
func (x *exchange) run() {
	g, r := x.g, x.r
	hdr := upstreamRequestHeader(r)
	x.reqID = hdr[hdrXRequestID][0]
	if g.subsetHeader != "" {
		if entries := parseSubsetHint(r.Header[g.subsetHeader]); len(entries) > 0 {
			x.subset = subsetStruct(entries)
		}
	}
	x.noBody = r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0
	if !x.noBody {
		x.startBodyDeadline()
		defer x.stopBodyTimer()
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	first := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers:     headerMap([]string{":authority", r.Host, ":path", requestPath(r), ":method", r.Method, ":scheme", scheme}, hdr),
			EndOfStream: x.noBody,
		}},
		MetadataContext: requestMetadata(x.subset),
		ProtocolConfig:  protocolConfig,
	}

	conn, err := g.conns.acquire()
	var stream extprocv3.ExternalProcessor_ProcessClient
	if err == nil {
		defer g.conns.release(conn) // runs after the stream is cancelled and its reader is done
		stream, err = conn.client.Process(x.ctx)
	}
	if err != nil {
		if x.clientGone() {
			g.metrics.request(statusClientClosed, sourceClient)
			return
		}
		x.eppFailed(&failure{kind: extProcUnavailable, reason: ReasonEPPUnavailable, err: fmt.Errorf("open ext_proc stream: %w", err)})
		return
	}
	x.stream = stream
	x.decided = make(chan struct{})
	x.done = make(chan struct{})
	go x.readLoop()
	defer func() {
		x.cancel()
		<-x.done
	}()

	// 1. Request headers and body, full duplex: never wait for answers here.
	x.send(first)
	if !x.noBody {
		l := x.streamRequestBody(first.MetadataContext)
		if l == nil && (!x.stopBodyTimer() || x.bodyTimedOut.Load()) {
			// Stopped early (the EPP decided, or a send failed) just as the
			// fallback timer cancelled the stream.
			l = x.bodyTimeoutReply()
		}
		if l != nil {
			x.cancel() // reset the ext_proc stream, as Envoy does on a local reply
			<-x.done
			if l.reason == ReasonRequestTimeout {
				// The read error cancelled the request context; the client is
				// still there to be told.
				g.metrics.timeouts[timeoutBodyRead].Inc()
				x.logV(2, "request body read timeout", "timeout", g.bodyTimeout.String())
			} else if x.clientGone() {
				g.metrics.request(statusClientClosed, sourceClient)
				return
			}
			g.directReply(x.w, *l)
			return
		}
	}

	// 2. Wait for the routing decision.
	timer := time.NewTimer(g.msgTimeout)
	defer timer.Stop()
	select {
	case <-x.decided:
	case <-timer.C:
		select {
		case <-x.decided: // decided just as the timer fired
		default:
			x.cancel()
			<-x.done
			x.eppFailed(&failure{kind: extProcTimeout, reason: ReasonEPPTimeout,
				err: fmt.Errorf("no routing decision within %s", g.msgTimeout)})
			return
		}
	case <-r.Context().Done():
		g.metrics.request(statusClientClosed, sourceClient)
		return
	}
	if x.decisionFail != nil {
		if x.clientGone() {
			g.metrics.request(statusClientClosed, sourceClient)
			return
		}
		x.eppFailed(x.decisionFail)
		return
	}
	if x.immediate != nil {
		status := writeImmediate(x.w, x.immediate)
		g.metrics.request(status, sourceEPP)
		if x.debugOn() {
			x.debug("immediate response from the EPP", "status", status)
		}
		return
	}

	// 3. Apply the request mutation and route.
	var ps pseudoMutations
	if err := applyHeaderMutation(hdr, x.reqMutation, targetRequest, &ps); err != nil {
		x.cancel()
		x.eppFailed(protocolError("request_headers header_mutation: %v", err))
		return
	}
	destValue := x.dest
	if !x.destSet {
		destValue = strings.Join(hdr[canonKey(DestinationHeader)], ",")
	}
	dests, invalid := parseEndpointList(destValue)
	if len(invalid) > 0 {
		x.logV(2, "ignoring invalid destination entries from the EPP", "invalid", invalid, "destination", destValue)
	}
	if len(dests) == 0 {
		msg := "the endpoint picker named no destination"
		if destValue != "" {
			msg = fmt.Sprintf("the endpoint picker named no valid destination (%q)", destValue)
		}
		x.respondLocal(localReply{status: http.StatusServiceUnavailable, reason: ReasonNoRoute, message: msg})
		return
	}
	u := *r.URL
	u.Scheme, u.User, u.Fragment, u.RawFragment, u.Opaque = "http", nil, "", "", ""
	if ps.path != "" {
		pu, err := url.ParseRequestURI(ps.path)
		if err != nil {
			x.cancel()
			x.eppFailed(protocolError("request_headers header_mutation: :path %q: %v", ps.path, err))
			return
		}
		u.Path, u.RawPath, u.RawQuery = pu.Path, pu.RawPath, pu.RawQuery
	}
	delete(hdr, hdrContentLength)
	if _, ok := hdr[hdrUserAgent]; !ok {
		hdr[hdrUserAgent] = []string{""} // keep Go's transport from adding its own
	}
	body := x.reqBody

	// 4. Call the upstream, walking the list on connect failures only, all
	// within UpstreamHeaderTimeout.
	var (
		resp    *http.Response
		served  string
		lastErr error
		tried   int
	)
	x.upWaiting.Store(upWaitHeaders)
	x.upTimer = time.AfterFunc(g.upHeaderTimeout, x.upstreamTimerFired)
	defer x.upTimer.Stop()
	for i, ep := range dests {
		tried = i + 1
		target := u // one URL per attempt: the transport may keep a reference
		target.Host = ep
		out := &http.Request{
			Method: r.Method, URL: &target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: hdr, Host: r.Host, ContentLength: int64(len(body)), Body: http.NoBody,
		}
		if len(body) > 0 {
			out.Body = io.NopCloser(bytes.NewReader(body))
			out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		out = out.WithContext(x.upCtx)
		resp, lastErr = g.transport.RoundTrip(out)
		if lastErr == nil {
			served = ep
			g.metrics.attempts[attemptOK].Inc()
			break
		}
		if x.upCtx.Err() != nil {
			break
		}
		if isConnectFailure(lastErr) {
			g.metrics.attempts[attemptConnectFailure].Inc()
			if i+1 < len(dests) {
				g.metrics.fallbackWalks.Inc()
				x.logV(2, "upstream connect failure, trying the next endpoint", "endpoint", ep, "next", dests[i+1], "err", lastErr.Error())
				continue
			}
		} else {
			g.metrics.attempts[attemptError].Inc()
		}
		break
	}
	if x.upWaiting.Swap(upWaitNone) == upWaitNone && resp != nil {
		// The header timeout fired as the headers arrived, and cancelled
		// the upstream request: answer as a timeout, not with a response
		// whose body can no longer be read.
		_ = resp.Body.Close()
		resp = nil
	}
	x.upTimer.Stop()
	if resp == nil {
		switch {
		case x.clientGone():
			g.metrics.request(statusClientClosed, sourceClient)
		case x.lateImmediate.Load() != nil:
			x.cancel()
			status := writeImmediate(x.w, x.lateImmediate.Load())
			g.metrics.request(status, sourceEPP)
		case x.upTimedOut.Load() == upWaitHeaders:
			g.metrics.timeouts[timeoutUpstreamHeaders].Inc()
			x.logV(2, "upstream response header timeout", "timeout", g.upHeaderTimeout.String(), "endpoints", strings.Join(dests[:tried], ","))
			x.respondLocal(localReply{status: http.StatusGatewayTimeout, reason: ReasonUpstreamTimeout,
				message: fmt.Sprintf("no response headers from the upstream within %s (endpoints tried: %s)", g.upHeaderTimeout, strings.Join(dests[:tried], ","))})
		case x.upCtx.Err() != nil: // the reader failed
			<-x.done
			f := x.fail
			if f == nil {
				f = &failure{kind: extProcUnavailable, reason: ReasonEPPUnavailable, err: errors.New("ext_proc stream ended during the upstream request")}
			}
			x.eppFailed(f)
		case isConnectFailure(lastErr):
			x.respondLocal(localReply{status: http.StatusServiceUnavailable, reason: ReasonUpstreamConnectFailure,
				message: fmt.Sprintf("upstream connect error: %v (endpoints tried: %s)", lastErr, strings.Join(dests, ","))})
		default:
			x.respondLocal(localReply{status: http.StatusServiceUnavailable, reason: ReasonUpstreamReset,
				message: fmt.Sprintf("upstream reset after the request was sent: %v", lastErr)})
		}
		return
	}
	if x.debugOn() {
		x.debug("upstream responded", "served", served, "status", resp.StatusCode, "destinations", destValue)
	}
	h := resp.Header
	stripHopByHop(h)
	hasBody := resp.Body != http.NoBody && resp.ContentLength != 0
	x.respond(resp.StatusCode, h, resp.Body, hasBody, resp.Trailer, served, sourceUpstream)
	_ = resp.Body.Close()
}

// streamRequestBody sends the client body to the EPP chunk by chunk. It stops
// early when the EPP decided (immediate response or failure). It returns a
// reply when the body is too large or cannot be read.
func (x *exchange) streamRequestBody(md *corev3.Metadata) *localReply {
	bufp := x.g.getBuf()
	defer x.g.putBuf(bufp)
	buf := *bufp
	var total int64
	for {
		select {
		case <-x.decided:
			return nil
		default:
		}
		n, err := x.r.Body.Read(buf)
		if x.bodyTimedOut.Load() || (err != nil && errors.Is(err, os.ErrDeadlineExceeded)) {
			return x.bodyTimeoutReply()
		}
		total += int64(n)
		if total > x.g.maxBody {
			return &localReply{status: http.StatusRequestEntityTooLarge, reason: ReasonRequestTooLarge,
				message: fmt.Sprintf("request body exceeds the gateway limit of %d bytes", x.g.maxBody)}
		}
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			return &localReply{status: http.StatusBadRequest, reason: ReasonBadRequest,
				message: fmt.Sprintf("reading the request body: %v", err)}
		}
		if eof && !x.bodyComplete() {
			return x.bodyTimeoutReply()
		}
		if eof && hasTrailerValues(x.r.Trailer) {
			if n > 0 {
				x.send(requestBody(buf[:n], false, md))
			}
			x.sentReqTrailers.Store(true)
			x.send(&extprocv3.ProcessingRequest{
				Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{
					Trailers: headerMap(nil, presentTrailers(x.r.Trailer)),
				}},
				MetadataContext: md,
			})
			return nil
		}
		if n > 0 || eof {
			if !x.send(requestBody(buf[:n], eof, md)) {
				return nil // the reader reports why
			}
		}
		if eof {
			return nil
		}
	}
}

// startBodyDeadline bounds the client body to Options.BodyReadTimeout from
// now: with the connection's read deadline, which makes a pending read fail,
// or, where the ResponseWriter cannot set one, with a timer that cancels the
// ext_proc stream (the read itself then ends only when the client acts).
func (x *exchange) startBodyDeadline() {
	d := x.g.bodyTimeout
	if err := http.NewResponseController(x.w).SetReadDeadline(time.Now().Add(d)); err == nil {
		x.bodyDeadline = true
		return
	}
	x.bodyTimer = time.AfterFunc(d, func() {
		x.bodyTimedOut.Store(true)
		x.cancel()
	})
}

// bodyComplete lifts the body deadline once the whole body was read. A read
// deadline left on the connection would fail the server's background read
// and cancel the request. It reports false if the fallback timer fired
// first.
func (x *exchange) bodyComplete() bool {
	if x.bodyDeadline {
		x.bodyDeadline = false
		_ = http.NewResponseController(x.w).SetReadDeadline(time.Time{})
	}
	return x.stopBodyTimer()
}

// stopBodyTimer releases the fallback timer and reports false if it fired
// first. A deadline on the connection is left in place when the body was not
// read to its end, so that the server's drain of the unread body after the
// handler stays bounded too; the server sets the next request's deadlines
// itself.
func (x *exchange) stopBodyTimer() bool {
	t := x.bodyTimer
	if t == nil {
		return true
	}
	x.bodyTimer = nil
	return t.Stop()
}

func (x *exchange) bodyTimeoutReply() *localReply {
	return &localReply{status: http.StatusRequestTimeout, reason: ReasonRequestTimeout,
		message: fmt.Sprintf("the request body was not received within %s", x.g.bodyTimeout)}
}

// upstreamTimerFired is upTimer's callback.
func (x *exchange) upstreamTimerFired() {
	// Swapping to upWaitNone disarms: if the wait the timer measured ended
	// first (the headers arrived and the loop swapped it), this is a no-op,
	// and if the timer swaps first, the loop sees it and drops the
	// response, so exactly one side decides.
	w := x.upWaiting.Swap(upWaitNone)
	if w == upWaitNone {
		return
	}
	x.upTimedOut.CompareAndSwap(upWaitNone, w)
	x.upCancel()
}

// upstreamTimeout returns the metrics kind of the upstream timeout that
// fired, or "" when none did.
func (x *exchange) upstreamTimeout() string {
	switch x.upTimedOut.Load() {
	case upWaitHeaders:
		return timeoutUpstreamHeaders
	case upWaitIdle:
		return timeoutUpstreamIdle
	}
	return ""
}

// readUpstream reads the next piece of an upstream response body; timed arms
// UpstreamIdleTimeout for the duration of the read only, so a slow EPP or
// client (back-pressure on the sends) does not count as an idle upstream.
func (x *exchange) readUpstream(body io.Reader, buf []byte, timed bool) (int, error) {
	if !timed {
		return body.Read(buf)
	}
	x.upTimer.Reset(x.g.upIdleTimeout)
	n, err := body.Read(buf)
	x.upTimer.Stop()
	return n, err
}

// upstreamFailed records an upstream body read error and returns the kind of
// timeout that caused it ("" for none).
func (x *exchange) upstreamFailed(err error) string {
	kind := x.upstreamTimeout()
	if kind != "" {
		x.g.metrics.timeouts[kind].Inc()
		x.logV(2, "upstream response timeout", "kind", kind, "err", err.Error())
	}
	return kind
}

func requestBody(chunk []byte, eos bool, md *corev3.Metadata) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eos}},
		MetadataContext: md,
	}
}

func responseBody(chunk []byte, eos bool, md *corev3.Metadata) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eos}},
		MetadataContext: md,
	}
}

// respondLocal sends a gateway-generated reply through the EPP's response path
// (Envoy's router local replies pass through the encoder filters), or straight
// to the client when the stream is gone.
func (x *exchange) respondLocal(l localReply) {
	h, body := l.render()
	h[hdrContentLength] = []string{strconv.Itoa(len(body))}
	x.respond(l.status, h, bytes.NewReader(body), true, nil, "", sourceGateway)
}

// respond runs the response phase: response_headers, response_body chunks and
// response_trailers go to the EPP while the reader writes the EPP's answers to
// the client.
func (x *exchange) respond(status int, h http.Header, body io.Reader, hasBody bool, trailer http.Header, served, source string) {
	g := x.g
	select {
	case <-x.done:
		// The reader already exited before the response phase.
		switch {
		case x.fail == nil && x.cleanEOF:
			// The EPP closed its stream cleanly: like Envoy, stop processing and
			// pass the response through unmodified.
			x.passthrough(status, h, body, hasBody, trailer, source)
		case source == sourceGateway:
			x.passthrough(status, h, body, hasBody, trailer, source)
		case x.clientGone():
			g.metrics.request(statusClientClosed, sourceClient)
		default:
			f := x.fail
			if f == nil {
				f = &failure{kind: extProcUnavailable, reason: ReasonEPPUnavailable, err: errors.New("ext_proc stream ended before the response")}
			}
			x.eppFailed(f)
		}
		return
	default:
	}
	if imm := x.lateImmediate.Load(); imm != nil {
		x.cancel()
		<-x.done
		status := writeImmediate(x.w, imm)
		g.metrics.request(status, sourceEPP)
		return
	}

	md := responseMetadata(x.subset, served)
	headersMsg := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers:     headerMap([]string{":status", statusString(status)}, h),
			EndOfStream: !hasBody,
		}},
		MetadataContext: md,
	}
	// Publish the state; from here on only the reader touches h and x.w.
	x.resp.Store(&responseState{status: status, header: h, noBody: !hasBody, source: source})
	x.phase.Store(phaseResponse)
	x.send(headersMsg)

	var (
		upstreamErr error
		upTimeout   string
	)
	timed := source == sourceUpstream && x.upTimer != nil
	if timed {
		x.upWaiting.Store(upWaitIdle)
	}
	if hasBody && x.sendErr == nil {
		bufp := g.getBuf()
		buf := *bufp
		for {
			n, err := x.readUpstream(body, buf, timed)
			eof := errors.Is(err, io.EOF)
			if err != nil && !eof {
				upstreamErr = err
				break
			}
			if eof && trailer != nil && hasTrailerValues(trailer) {
				if n > 0 {
					x.send(responseBody(buf[:n], false, md))
				}
				tr := presentTrailers(trailer)
				msg := &extprocv3.ProcessingRequest{
					Request:         &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(nil, tr)}},
					MetadataContext: md,
				}
				x.trailers.Store(&tr)
				x.send(msg)
				break
			}
			if n > 0 || eof {
				if !x.send(responseBody(buf[:n], eof, md)) {
					break
				}
			}
			if eof {
				break
			}
		}
		g.putBuf(bufp)
	}
	if upstreamErr != nil {
		upTimeout = x.upstreamFailed(upstreamErr)
	}
	// Half-close even after an upstream failure: the EPP answers what it got
	// (the response headers may still reach the client, then the response is
	// cut) and ends its stream; MessageTimeout bounds an EPP that does not.
	_ = x.stream.CloseSend()

	timer := time.NewTimer(g.msgTimeout)
	timedOut := false
	select {
	case <-x.done:
	case <-timer.C:
		timedOut = true
		x.cancel()
		<-x.done
	}
	timer.Stop()

	switch {
	case x.respComplete:
		g.metrics.request(x.status, x.source)
		if x.debugOn() {
			x.debug("request complete", "status", x.status, "source", x.source, "served", served)
		}
	case x.clientGone() || (x.fail != nil && x.fail.kind == ""):
		g.metrics.request(statusClientClosed, sourceClient)
	case !x.respWritten:
		switch {
		case upTimeout != "":
			g.directReply(x.w, localReply{status: http.StatusGatewayTimeout, reason: ReasonUpstreamTimeout,
				message: fmt.Sprintf("the upstream response stalled: %s", upstreamTimeoutMessage(upTimeout, g))})
		case upstreamErr != nil:
			g.directReply(x.w, localReply{status: http.StatusServiceUnavailable, reason: ReasonUpstreamReset,
				message: fmt.Sprintf("upstream failed before the response headers were sent: %v", upstreamErr)})
		case timedOut && x.fail == nil:
			x.eppFailed(&failure{kind: extProcTimeout, reason: ReasonEPPTimeout,
				err: fmt.Errorf("response not processed within %s", g.msgTimeout)})
		default:
			f := x.fail
			if f == nil {
				f = &failure{kind: extProcUnavailable, reason: ReasonEPPUnavailable, err: errors.New("ext_proc stream ended before the response headers were answered")}
			}
			x.eppFailed(f)
		}
	default:
		// Headers already reached the client: reset the downstream stream like
		// Envoy does, so the client sees a truncated response, not a complete one.
		if x.fail != nil && x.fail.kind != "" && upstreamErr == nil { // else the EPP ended a stream cut short by the upstream
			g.metrics.extProcErrors[x.fail.kind].Inc()
		}
		x.logV(2, "aborting the client response", "status", x.status, "upstreamErr", errString(upstreamErr), "upstreamTimeout", upTimeout,
			"eppErr", failString(x.fail), "timedOut", timedOut)
		g.metrics.request(x.status, x.source)
		panic(http.ErrAbortHandler)
	}
}

// passthrough writes a response straight to the client (main goroutine; the
// reader has exited).
func (x *exchange) passthrough(status int, h http.Header, body io.Reader, hasBody bool, trailer http.Header, source string) {
	wh := x.w.Header()
	for k, v := range h {
		wh[k] = v
	}
	x.w.WriteHeader(status)
	x.g.metrics.request(status, source)
	if !hasBody {
		return
	}
	rc := http.NewResponseController(x.w)
	bufp := x.g.getBuf()
	defer x.g.putBuf(bufp)
	buf := *bufp
	timed := source == sourceUpstream && x.upTimer != nil
	if timed {
		x.upWaiting.Store(upWaitIdle)
	}
	for {
		n, err := x.readUpstream(body, buf, timed)
		if n > 0 {
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !x.clientGone() {
				if timed {
					x.upstreamFailed(err)
				}
				panic(http.ErrAbortHandler)
			}
			break
		}
	}
	for k, v := range trailer {
		if len(v) > 0 {
			wh[http.TrailerPrefix+k] = v
		}
	}
}

func upstreamTimeoutMessage(kind string, g *Gateway) string {
	if kind == timeoutUpstreamHeaders {
		return fmt.Sprintf("no response headers within %s", g.upHeaderTimeout)
	}
	return fmt.Sprintf("no response body data for %s", g.upIdleTimeout)
}

// eppFailed answers the client after an EPP failure (FailClose).
func (x *exchange) eppFailed(f *failure) {
	if f.kind == "" { // the client went away: nobody to answer
		x.g.metrics.request(statusClientClosed, sourceClient)
		return
	}
	x.g.metrics.extProcErrors[f.kind].Inc()
	x.logV(2, "ext_proc failure", "reason", f.reason, "err", f.err.Error())
	x.g.directReply(x.w, f.reply())
}

// writeImmediate writes an ImmediateResponse to the client the way Envoy
// does: status (200 when unset or invalid), header mutation with permissive
// rules, body; content-type text/plain when a body has none. It returns the
// status written.
func writeImmediate(w http.ResponseWriter, imm *extprocv3.ImmediateResponse) int {
	status := int(imm.GetStatus().GetCode())
	if status < 200 || status > 999 {
		status = http.StatusOK
	}
	h := w.Header()
	var ps pseudoMutations
	_ = applyHeaderMutation(h, imm.GetHeaders(), targetImmediate, &ps) // like Envoy: apply what is valid
	body := imm.GetBody()
	if len(body) > 0 && len(h[hdrContentType]) == 0 {
		h[hdrContentType] = []string{"text/plain"}
	}
	h[hdrContentLength] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
	return status
}

// requestPath is the :path pseudo-header: the request target as received, or
// its origin form for absolute-form targets.
func requestPath(r *http.Request) string {
	if p := r.RequestURI; p != "" && (p[0] == '/' || p == "*") {
		return p
	}
	return r.URL.RequestURI()
}

// isConnectFailure reports an error that happened while connecting, before any
// byte of the request was written (Envoy's connect-failure retry condition).
func isConnectFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func failString(f *failure) string {
	if f == nil {
		return ""
	}
	return f.err.Error()
}

func (x *exchange) logV(level int, msg string, kv ...any) {
	if l := x.g.log.V(level); l.Enabled() {
		l.Info(msg, append(kv, "method", x.r.Method, "path", x.r.URL.Path, "requestID", x.reqID)...)
	}
}

func (x *exchange) debug(msg string, kv ...any) { x.logV(4, msg, kv...) }

// debugOn guards per-request debug logs so their arguments are not built
// (and boxed) when V(4) is off.
func (x *exchange) debugOn() bool { return x.g.log.V(4).Enabled() }
