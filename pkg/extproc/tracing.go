package extproc

// Tracing of a stream (pkg/tracing, Options.Tracer): the request's span
// and its children, and the W3C trace context on the upstream request.
// Every method here is a no-op, without allocation, when the Server has
// no Tracer; when the request is not sampled, only the trace context is
// still propagated (traceparent with the sampled flag off), so that the
// model server follows this EPP's decision.

import (
	"context"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// streamTrace is a stream's tracing state.
type streamTrace struct {
	// began is when the stream started, with a Tracer.
	began time.Time
	// rootCtx carries the request's span; nil when the stream is not
	// traced (no Tracer, or no request headers yet).
	rootCtx context.Context
	root    trace.Span
	// rec is root.IsRecording(): the request is sampled.
	rec bool
	// reqBody and respBody are open from the first body chunk to the
	// body's end.
	reqBody, respBody trace.Span
	// refusal is the reason of the refusal that ended the request.
	refusal string
	status  int
	// prio is the request's priority, once parsed (prioSet).
	prio    int
	prioSet bool
	// flowOutcome is flow control's outcome (GIEOutcome), once held.
	flowOutcome string
}

// tracePriority notes the parsed request's priority for the
// orchestration span (request_prio, where GIE puts it).
func (st *stream) tracePriority(prio int) {
	if st.tr.rec {
		st.tr.prio, st.tr.prioSet = prio, true
	}
}

// traceFlowOutcome notes flow control's outcome for its span.
func (st *stream) traceFlowOutcome(outcome string) {
	if st.tr.rec {
		st.tr.flowOutcome = outcome
	}
}

// endFlowSpan ends the flow control span with its outcome.
func (st *stream) endFlowSpan(sp trace.Span) {
	if sp.IsRecording() && st.tr.flowOutcome != "" {
		sp.SetAttributes(attribute.String(tracing.AttrFlowOutcome, st.tr.flowOutcome))
	}
	sp.End()
}

// traceBegin notes the stream's start, the start of its span.
func (st *stream) traceBegin() {
	if st.s.opts.Tracer != nil {
		st.tr.began = time.Now()
	}
}

// traceStart starts the request's span once its headers are read (a
// child of the gateway's traceparent, when it sent one) and the headers
// span, from the stream's start to now.
func (st *stream) traceStart() {
	t := st.s.opts.Tracer
	if t == nil {
		return
	}
	ctx, root := t.StartRequest(st.ctx, tracing.SpanRequest, st.headers, trace.WithTimestamp(st.tr.began))
	st.ctx, st.tr.rootCtx, st.tr.root, st.tr.rec = ctx, ctx, root, root.IsRecording()
	if !st.tr.rec {
		return
	}
	root.SetAttributes(attribute.String(tracing.AttrRequestID, st.reqID))
	_, sp := tracing.Start(ctx, tracing.SpanRequestHeaders, trace.WithTimestamp(st.tr.began))
	sp.End()
}

// traceRequestChunk opens the request body span at the first chunk.
func (st *stream) traceRequestChunk() {
	if st.tr.rec && st.tr.reqBody == nil {
		_, st.tr.reqBody = tracing.Start(st.tr.rootCtx, tracing.SpanRequestBody)
	}
}

// spanScope is a span entered by enter: st.ctx carries it until exit.
type spanScope struct {
	prev  context.Context
	span  trace.Span
	route bool // the orchestration span: it gets the routing attributes
}

// enter starts a child of the request's span and makes st.ctx carry it,
// so that the scheduling and plugin spans of this step nest below it.
func (st *stream) enter(name string) spanScope {
	if !st.tr.rec {
		return spanScope{}
	}
	route := name == tracing.SpanRequestOrchestration
	switch {
	case route && st.tr.reqBody != nil:
		st.tr.reqBody.End() // the body is complete
		st.tr.reqBody = nil // ended once: traceEnd must not end it again
	case name == tracing.SpanResponseComplete && st.tr.respBody != nil:
		st.tr.respBody.End()
		st.tr.respBody = nil
	}
	prev := st.ctx
	ctx, sp := tracing.Start(st.tr.rootCtx, name)
	st.ctx = ctx
	return spanScope{prev: prev, span: sp, route: route}
}

// exit ends a span enter started, with the outcome of its step.
func (st *stream) exit(s spanScope) {
	if s.span == nil {
		return
	}
	st.ctx = s.prev
	if s.route {
		if st.tr.prioSet {
			s.span.SetAttributes(attribute.Int(tracing.AttrPriority, st.tr.prio))
		}
		if st.tr.refusal != "" {
			s.span.SetAttributes(attribute.String(tracing.AttrRefusalReason, st.tr.refusal))
			s.span.SetStatus(codes.Error, "refused: "+st.tr.refusal)
		}
		st.setRouteAttributes(s.span)
	}
	s.span.End()
}

// child starts a child of the span in st.ctx (a step of the
// orchestration); it records nothing when the request is not sampled.
func (st *stream) child(name string) trace.Span {
	if !st.tr.rec {
		return tracing.Noop()
	}
	_, sp := tracing.Start(st.ctx, name)
	return sp
}

// flowSpan starts the span of the wait in flow control (Runtime.Flow).
func (st *stream) flowSpan() trace.Span {
	if st.rt.Flow == nil {
		return tracing.Noop()
	}
	return st.child(tracing.SpanFlowControl)
}

// traceSite ends the site stage's span with its decision.
func traceSite(sp trace.Span, d *sitestage.Decision) {
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String(tracing.AttrSiteTier, d.Tier.String()), attribute.String(tracing.AttrSitePath, d.Path),
			attribute.String(tracing.AttrSiteReason, d.Reason), attribute.String(tracing.AttrSite, d.Site))
		if d.Gateway != "" {
			sp.SetAttributes(attribute.String(tracing.AttrSiteRemote, d.Gateway))
		}
		if d.Refusal != nil {
			sp.SetAttributes(attribute.String(tracing.AttrRefusalReason, d.Refusal.Reason))
		}
	}
	sp.End()
}

// traceRefusal records the refusal that ends the request.
func (st *stream) traceRefusal(r *refusal) {
	if st.tr.rec {
		st.tr.refusal, st.tr.status = r.reason, r.status
	}
}

// traceHeaders adds the request's trace context (traceparent,
// tracestate, baggage) to the upstream request's header mutations.
func (st *stream) traceHeaders(set []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	if st.tr.rootCtx == nil {
		return set
	}
	st.s.opts.Tracer.Inject(st.tr.rootCtx, func(k, v string) { set = append(set, headerOption(k, v)) })
	return set
}

// traceResponseChunk opens the response body span at the first chunk.
func (st *stream) traceResponseChunk() {
	if st.tr.rec && st.tr.respBody == nil {
		_, st.tr.respBody = tracing.Start(st.tr.rootCtx, tracing.SpanResponseBody)
	}
}

// setRouteAttributes sets what the request was and where it went.
func (st *stream) setRouteAttributes(sp trace.Span) {
	if st.parsed.Model != "" {
		sp.SetAttributes(attribute.String(tracing.AttrModel, st.parsed.Model), attribute.String(tracing.AttrTargetModel, st.targetModel()))
	}
	if st.fallbackModel != "" {
		sp.SetAttributes(attribute.String(tracing.AttrFallbackModel, st.fallbackModel))
	}
	if dest := st.destination(); dest != "" {
		sp.SetAttributes(attribute.String(tracing.AttrEndpoint, dest))
	}
	if st.site.site != "" {
		sp.SetAttributes(attribute.String(tracing.AttrSite, st.site.site))
	}
}

// traceEnd ends the request's span when the stream ends, with the
// request's outcome.
func (st *stream) traceEnd() {
	if st.tr.root == nil {
		return
	}
	if !st.tr.rec {
		st.tr.root.End()
		return
	}
	now := time.Now()
	for _, sp := range []trace.Span{st.tr.reqBody, st.tr.respBody} {
		if sp != nil {
			sp.End(trace.WithTimestamp(now))
		}
	}
	root := st.tr.root
	st.setRouteAttributes(root)
	status := st.resp.StatusCode
	if st.tr.refusal != "" {
		status = st.tr.status
		root.SetAttributes(attribute.String(tracing.AttrRefusalReason, st.tr.refusal))
		root.SetStatus(codes.Error, "refused: "+st.tr.refusal)
	}
	if status != 0 {
		root.SetAttributes(attribute.Int(tracing.AttrStatusCode, status))
	}
	if st.resp.Disconnected {
		root.SetAttributes(attribute.Bool(tracing.AttrDisconnected, true))
	}
	if u := st.resp.Usage; u.PromptTokens > 0 || u.CompletionTokens > 0 {
		root.SetAttributes(attribute.Int(tracing.AttrPromptTokens, u.PromptTokens), attribute.Int(tracing.AttrOutputTokens, u.CompletionTokens))
	}
	root.SetAttributes(attribute.Int(tracing.AttrResponseBytes, st.respBytes))
	root.End(trace.WithTimestamp(now))
}
