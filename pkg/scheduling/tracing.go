package scheduling

// Spans of scheduling (pkg/tracing): one per Process, per profile run and
// per plugin run, children of the request's span. Nothing is started,
// and nothing allocated, when the request's span does not record.

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// pluginSpan starts the span of one run of p at point when traced (the
// caller's tracing.Recording(ctx), read once per loop).
func pluginSpan(traced bool, ctx context.Context, point string, p Plugin) (context.Context, trace.Span) {
	if !traced {
		return ctx, tracing.Noop()
	}
	tn := p.TypedName()
	ctx, sp := tracing.Start(ctx, point+" "+tn.Name)
	sp.SetAttributes(attribute.String(tracing.AttrPoint, point), attribute.String(tracing.AttrPluginType, tn.Type),
		attribute.String(tracing.AttrPluginName, tn.Name))
	return ctx, sp
}

// endFilter ends a filter's span with the endpoints it kept.
func endFilter(sp trace.Span, left int) {
	if sp.IsRecording() {
		sp.SetAttributes(attribute.Int(tracing.AttrEndpointsOut, left))
	}
	sp.End()
}

// startProcess starts the span of one Process call.
func startProcess(ctx context.Context, req *Request, candidates []*Endpoint) (context.Context, trace.Span) {
	ctx, sp := tracing.Start(ctx, tracing.SpanSchedule)
	if sp.IsRecording() && req != nil {
		sp.SetAttributes(attribute.String(tracing.AttrModel, req.Model), attribute.String(tracing.AttrTargetModel, req.TargetModel),
			attribute.Int(tracing.AttrPriority, req.Priority), attribute.Int(tracing.AttrCandidates, len(candidates)))
	}
	return ctx, sp
}

// startProfile starts the span of one profile run.
func startProfile(ctx context.Context, name string, candidates int) (context.Context, trace.Span) {
	ctx, sp := tracing.Start(ctx, tracing.SpanProfile)
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String(tracing.AttrProfile, name), attribute.Int(tracing.AttrCandidates, candidates))
	}
	return ctx, sp
}

// spanRefused marks a span with the refusal that ends the request.
func spanRefused(sp trace.Span, r *Refusal) {
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String(tracing.AttrRefusalReason, r.Reason), attribute.Int(tracing.AttrStatusCode, r.StatusCode))
		sp.SetStatus(codes.Error, r.Message)
	}
}

// spanFailed marks a span with a scheduling failure.
func spanFailed(sp trace.Span, err error) {
	if sp.IsRecording() {
		sp.SetStatus(codes.Error, err.Error())
	}
}

// spanChose sets the chosen endpoints on a span.
func spanChose(sp trace.Span, targets []*Endpoint) {
	if !sp.IsRecording() || len(targets) == 0 {
		return
	}
	var b strings.Builder
	for i, e := range targets {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.HostPort())
	}
	sp.SetAttributes(attribute.String(tracing.AttrEndpoint, b.String()))
}
