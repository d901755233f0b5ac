package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// readLoop is the exchange's stream reader: the only goroutine that receives
// from the ext_proc stream. It never blocks on the handler goroutine, so a
// full-duplex EPP can always make progress.
func (x *exchange) readLoop() {
	defer close(x.done)
	f := x.receive()
	x.fail = f
	if !x.isDecided {
		if f == nil {
			f = &failure{kind: extProcUnavailable, reason: ReasonEPPUnavailable, err: errors.New("ext_proc stream ended before the routing decision")}
		}
		x.decisionFail = f
		x.isDecided = true
		close(x.decided)
	}
	if x.fail != nil {
		x.cancel() // stop the handler's sends and the upstream request
	}
}

func (x *exchange) receive() *failure {
	for {
		m, err := x.stream.Recv()
		if err != nil {
			return x.streamEnded(err)
		}
		if f := x.handle(m); f != nil {
			return f
		}
	}
}

// streamEnded classifies the end of the stream.
func (x *exchange) streamEnded(err error) *failure {
	if errors.Is(err, io.EOF) {
		// The EPP ended the stream with an OK status.
		x.cleanEOF = true
		switch {
		case !x.isDecided:
			return &failure{kind: extProcUnavailable, reason: ReasonEPPUnavailable, err: errors.New("the EPP closed the ext_proc stream before the routing decision")}
		case x.phase.Load() == phaseResponse && !x.respComplete:
			return &failure{kind: extProcUnavailable, reason: ReasonEPPUnavailable, err: errors.New("the EPP closed the ext_proc stream before the response was complete")}
		}
		return nil
	}
	if x.respComplete {
		return nil // cancelled after the reply was complete
	}
	if x.r.Context().Err() != nil {
		return &failure{err: fmt.Errorf("client went away: %w", err)}
	}
	return &failure{kind: extProcUnavailable, reason: ReasonEPPUnavailable, err: fmt.Errorf("ext_proc stream: %w", err)}
}

func (x *exchange) decide() {
	if !x.isDecided {
		x.isDecided = true
		close(x.decided)
	}
}

func (x *exchange) maybeDecide() {
	if x.gotReqHeaders && (x.noBody || x.reqBodyEOS || x.gotReqTrail) {
		x.decide()
	}
}

func (x *exchange) takeDestination(md *structpb.Struct) {
	if md == nil {
		return
	}
	if d, ok := destinationFromMetadata(md); ok {
		x.dest, x.destSet = d, true
	}
}

// handle applies one ProcessingResponse. Ordering rules are Envoy's: per
// direction headers, then body chunks, then trailers.
func (x *exchange) handle(m *extprocv3.ProcessingResponse) *failure {
	if (m.GetModeOverride() != nil || m.GetOverrideMessageTimeout() != nil) && x.debugOn() {
		x.debug("ignoring mode_override / override_message_timeout (FULL_DUPLEX_STREAMED)")
	}
	switch v := m.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		if x.isDecided || x.gotReqHeaders {
			return protocolError("unexpected request_headers response")
		}
		x.gotReqHeaders = true
		x.reqMutation = v.RequestHeaders.GetResponse().GetHeaderMutation()
		x.takeDestination(m.GetDynamicMetadata())
		x.maybeDecide()
	case *extprocv3.ProcessingResponse_RequestBody:
		switch {
		case x.isDecided || x.noBody || x.reqBodyEOS:
			return protocolError("unexpected request_body response")
		case !x.gotReqHeaders:
			return protocolError("request_body response before the request_headers response")
		}
		sr := v.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return protocolError("request_body response without body_mutation.streamed_response (required in FULL_DUPLEX_STREAMED mode)")
		}
		if int64(len(x.reqBody))+int64(len(sr.GetBody())) > x.g.maxEPPBody {
			return protocolError("request body returned by the EPP exceeds %d bytes", x.g.maxEPPBody)
		}
		if x.reqBody == nil {
			x.reqBody = sr.GetBody()
		} else {
			x.reqBody = append(x.reqBody, sr.GetBody()...)
		}
		x.reqBodyEOS = sr.GetEndOfStream()
		x.takeDestination(m.GetDynamicMetadata())
		x.maybeDecide()
	case *extprocv3.ProcessingResponse_RequestTrailers:
		switch {
		case x.isDecided || !x.sentReqTrailers.Load():
			return protocolError("unexpected request_trailers response")
		case !x.gotReqHeaders:
			return protocolError("request_trailers response before the request_headers response")
		}
		x.gotReqTrail = true
		x.takeDestination(m.GetDynamicMetadata())
		x.maybeDecide()
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		imm := v.ImmediateResponse
		if imm == nil {
			return protocolError("empty immediate_response")
		}
		switch {
		case !x.isDecided:
			x.immediate = imm
			x.decide()
		case x.phase.Load() == phaseRequest:
			// Routed, upstream call in flight: abort it and answer with this.
			x.lateImmediate.Store(imm)
			x.upCancel()
		default:
			return x.responseImmediate(imm)
		}
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return x.responseHeaders(v.ResponseHeaders)
	case *extprocv3.ProcessingResponse_ResponseBody:
		return x.responseBody(v.ResponseBody)
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		return x.responseTrailers(v.ResponseTrailers)
	case nil:
		return protocolError("ProcessingResponse without a response")
	default:
		return protocolError("unsupported response %T", v)
	}
	return nil
}

func (x *exchange) responseHeaders(hr *extprocv3.HeadersResponse) *failure {
	rs := x.resp.Load()
	if x.phase.Load() != phaseResponse || rs == nil || x.respGotHeaders || x.respComplete {
		return protocolError("unexpected response_headers response")
	}
	x.respGotHeaders = true
	h := rs.header
	if !rs.noBody {
		// The body may change in FULL_DUPLEX_STREAMED mode, so the upstream's
		// length no longer holds; the EPP may set one explicitly.
		delete(h, hdrContentLength)
	}
	var ps pseudoMutations
	if err := applyHeaderMutation(h, hr.GetResponse().GetHeaderMutation(), targetResponse, &ps); err != nil {
		return protocolError("response_headers header_mutation: %v", err)
	}
	status := rs.status
	if ps.status != 0 {
		status = ps.status
	}
	wh := x.w.Header()
	for k, v := range h {
		wh[k] = v
	}
	x.w.WriteHeader(status)
	x.respWritten = true
	x.status, x.source = status, rs.source
	if rs.noBody {
		x.respComplete = true
		return nil
	}
	return x.flush() // SSE: headers reach the client before the first event
}

func (x *exchange) responseBody(br *extprocv3.BodyResponse) *failure {
	if !x.respGotHeaders || x.respBodyEOS || x.respComplete {
		return protocolError("unexpected response_body response")
	}
	sr := br.GetResponse().GetBodyMutation().GetStreamedResponse()
	if sr == nil {
		return protocolError("response_body response without body_mutation.streamed_response (required in FULL_DUPLEX_STREAMED mode)")
	}
	if b := sr.GetBody(); len(b) > 0 {
		if _, err := x.w.Write(b); err != nil {
			return &failure{err: fmt.Errorf("writing to the client: %w", err)}
		}
		if f := x.flush(); f != nil {
			return f
		}
	}
	if sr.GetEndOfStream() {
		x.respBodyEOS = true
		if x.trailers.Load() == nil {
			x.respComplete = true
		}
	}
	return nil
}

func (x *exchange) responseTrailers(tr *extprocv3.TrailersResponse) *failure {
	t := x.trailers.Load()
	if t == nil || !x.respGotHeaders || x.respComplete {
		return protocolError("unexpected response_trailers response")
	}
	var ps pseudoMutations
	if err := applyHeaderMutation(*t, tr.GetHeaderMutation(), targetTrailers, &ps); err != nil {
		return protocolError("response_trailers header_mutation: %v", err)
	}
	wh := x.w.Header()
	for k, v := range *t {
		wh[http.TrailerPrefix+k] = v
	}
	x.respComplete = true
	return nil
}

// responseImmediate answers the client with an immediate_response received
// during the response phase, if the response headers were not sent yet.
func (x *exchange) responseImmediate(imm *extprocv3.ImmediateResponse) *failure {
	if x.respWritten {
		return protocolError("immediate_response after the response headers were sent to the client")
	}
	status := writeImmediate(x.w, imm)
	x.respWritten, x.respComplete = true, true
	x.status, x.source = status, sourceEPP
	x.upCancel() // stop reading the upstream response
	return nil
}

func (x *exchange) flush() *failure {
	if err := http.NewResponseController(x.w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return &failure{err: fmt.Errorf("flushing to the client: %w", err)}
	}
	return nil
}
