package extproc

// The routing of a complete request: parse, candidates, schedule, answer.
// stream.go holds the protocol (message order, buffering, the response);
// this file holds what happens between the last request byte and the
// answer to the gateway.

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/switchyard-ai/switchyard/pkg/requests"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// route parses the complete body, schedules the request and answers. With
// endTrailers the last body chunk does not end the stream and the trailers
// get their answer; with endHeaders only the headers are answered (the
// gateway sent no body, so no body response may follow).
func (st *stream) route(end bodyEnd) ([]*extprocv3.ProcessingResponse, bool) {
	defer st.exit(st.enter(tracing.SpanRequestOrchestration))
	st.rt = st.s.opts.Runtime()
	if err := requests.Parse(st.rt.format(), requests.DetectAPI(st.path()), st.body, &st.parsed); err != nil {
		var perr *requests.Error
		if errors.As(err, &perr) {
			return st.refuse(&refusal{status: http.StatusBadRequest, reason: ReasonBadRequest, message: perr.Error()})
		}
		return st.refuse(&refusal{status: http.StatusBadRequest, reason: ReasonBadRequest, message: err.Error()})
	}
	req := &scheduling.Request{
		ID:              st.reqID,
		Model:           st.parsed.Model,
		TargetModel:     st.parsed.Model,
		Prompt:          st.parsed.Prompt,
		Headers:         st.headers,
		Objective:       st.headers[ObjectiveHeader],
		FairnessID:      st.headers[FairnessHeader],
		PromptTokens:    st.parsed.PromptTokens,
		BodyBytes:       len(st.body),
		MaxOutputTokens: st.parsed.MaxOutputTokens,
		Stream:          st.parsed.Stream,
	}
	if rw := st.headers[ModelRewriteHeader]; rw != "" {
		req.TargetModel = rw
	}
	if req.FairnessID == "" {
		req.FairnessID = DefaultFairnessID
	}
	if req.Objective != "" && st.s.opts.Objective != nil {
		if p, ok := st.s.opts.Objective(req.Objective); ok {
			req.Priority = p
		}
	}
	st.req = req
	st.tracePriority(req.Priority)
	st.explainStart(req)
	st.s.m.RequestReceived(req.Model, req.TargetModel, req.Priority)
	st.s.m.RequestSize(req.Model, req.TargetModel, len(st.body))

	if st.s.opts.Sites != nil {
		r, remote := st.siteStep(req)
		if r != nil {
			st.req = nil
			return st.refuse(r)
		}
		if remote {
			return st.routeRemote(end)
		}
	}
	// Flow control: wait here while the pool is saturated (queue.go).
	flowSpan := st.flowSpan()
	if out, done := st.hold(); done {
		st.endFlowSpan(flowSpan)
		return out, true
	}
	st.endFlowSpan(flowSpan)
	defer st.flowStarted()
	cands, r := st.candidates()
	if r != nil {
		st.req = nil // never scheduled: no completion hooks
		return st.refuse(r)
	}
	schedStart := st.s.now()
	req, fallbackModel, res, err := st.schedule(req, cands)
	st.req, st.fallbackModel = req, fallbackModel
	st.s.m.SchedulerE2E(st.s.now().Sub(schedStart))
	if err != nil {
		st.req = nil
		st.s.m.SchedulerAttempt(false, req.TargetModel, "", "", 0)
		var re *scheduling.RefusalError
		switch {
		case errors.As(err, &re):
			return st.refuse(fromScheduling(&re.Refusal))
		case errors.Is(err, scheduling.ErrNoEndpoints):
			return st.refuse(&refusal{status: http.StatusServiceUnavailable, reason: ReasonNoneScheduled,
				message: "no endpoint can serve the request: " + err.Error()})
		default:
			return st.refuse(&refusal{status: http.StatusInternalServerError, reason: ReasonInternal, message: "scheduling failed: " + err.Error()})
		}
	}
	st.targets = res.Targets()
	st.target = st.targets[0]
	md := st.target.Metadata()
	st.s.m.SchedulerAttempt(true, req.TargetModel, md.Name, md.Namespace, md.Port)

	body := st.body
	if req.TargetModel != req.Model && st.rt.format() != "passthrough" {
		rewritten, err := requests.RewriteModel(body, req.TargetModel)
		if err != nil {
			st.abandon()
			return st.refuse(&refusal{status: http.StatusInternalServerError, reason: ReasonInternal, message: "rewriting the model name: " + err.Error()})
		}
		body = rewritten
	}
	body = st.injectCacheControl(body)
	st.tokens = scheduling.EstimateTokens(req)
	if st.s.opts.Stats != nil {
		st.stats = st.s.opts.Stats(st.target)
	}
	if st.stats != nil {
		st.stats.Start(st.tokens)
	}
	st.running = true
	st.s.m.RunningRequests(req.Model, 1)
	st.phase = phaseForwarded
	st.forwardedAt = st.s.now()
	st.recordRouted(res)
	if st.v(3).Enabled() {
		st.v(3).Info("Routed", "model", req.Model, "targetModel", req.TargetModel, "endpoints", joinTargets(st.targets),
			"candidates", len(cands), "profile", res.PrimaryProfile, "bodyBytes", len(st.body))
	}
	out := make([]*extprocv3.ProcessingResponse, 0, 1+len(body)/BodyChunkLimit+1)
	out = append(out, st.headersResponse(len(body)))
	if end != endHeaders {
		out = appendBodyChunks(out, body, end == endBody, requestBodyResponse)
	}
	if end == endTrailers {
		out = append(out, &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}},
		})
	}
	// The body is handed back: the stream no longer holds it.
	st.body = nil
	st.release()
	return out, false
}

// abandon completes a request that was scheduled but will not be
// forwarded.
func (st *stream) abandon() {
	if st.req != nil && st.rt != nil {
		st.resp.Disconnected = true
		st.rt.Scheduler.ResponseComplete(context.WithoutCancel(st.ctx), st.req, &st.resp, st.target)
		st.completed = true
	}
}

// candidates returns the routable endpoints narrowed by the subset hint
// and, with Options.ConformanceTestHeaders only, the conformance test
// header, or the refusal when nothing is left. An endpoint out of rotation
// (unhealthy, circuit open) is never a candidate, whatever the hint says.
func (st *stream) candidates() ([]*scheduling.Endpoint, *refusal) {
	view := st.s.opts.Endpoints()
	cands := view.Routable()
	if len(cands) == 0 {
		msg := "no ready endpoints in the pool"
		if n := len(view.All()); n > 0 {
			msg = "no routable endpoint: all " + strconv.Itoa(n) + " endpoints of the pool are out of rotation (health check failed or circuit breaker open)"
		}
		return nil, &refusal{status: http.StatusServiceUnavailable, reason: ReasonNoEndpoints, message: msg}
	}
	if !st.s.opts.DisableSubsetFilter {
		if st.hasSubset {
			cands = filterEndpoints(cands, st.subset)
			if len(cands) == 0 {
				return nil, &refusal{status: http.StatusServiceUnavailable, reason: ReasonSubsetNoMatch,
					message: "failed to find endpoint candidates for serving the request: the subset hint matches no ready endpoint"}
			}
		}
	}
	if st.s.opts.ConformanceTestHeaders {
		if sel := st.headers[TestSelectionHeader]; sel != "" {
			cands = filterEndpoints(cands, splitList(sel))
			if len(cands) == 0 {
				return nil, &refusal{status: http.StatusServiceUnavailable, reason: ReasonSubsetNoMatch,
					message: "the " + TestSelectionHeader + " header matches no ready endpoint"}
			}
		}
	}
	return cands, nil
}

// removeSelection is the RemoveHeaders of a request-headers response when
// the conformance selection header must not reach the upstream. Shared,
// never modified.
var removeSelection = []string{TestSelectionHeader}

// headersResponse is the answer to the request headers: destination
// header and identical envoy.lb metadata, Content-Length when the body is
// not empty, the request id when the EPP generated it, and the removal of
// the conformance selection header when the conformance hooks are off.
func (st *stream) headersResponse(bodyLen int) *extprocv3.ProcessingResponse {
	dest := st.destination()
	set := make([]*corev3.HeaderValueOption, 0, 4)
	set = append(set, headerOption(DestinationHeader, dest))
	if bodyLen > 0 {
		set = append(set, headerOption("content-length", strconv.Itoa(bodyLen)))
	}
	if st.genID {
		set = append(set, headerOption(RequestIDHeader, st.reqID))
	}
	set = st.siteRequestHeaders(set)
	set = st.traceHeaders(set)
	var remove []string
	if !st.s.opts.ConformanceTestHeaders {
		if _, ok := st.headers[TestSelectionHeader]; ok {
			remove = removeSelection
		}
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{
					ClearRouteCache: true,
					HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
				},
			},
		},
		DynamicMetadata: st.scoresMetadata(destinationMetadata(dest)),
	}
}
