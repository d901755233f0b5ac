package extproc

// The hold step of flow control: between parsing and scheduling, a
// request whose configuration has flow control on waits in the
// FlowController until it is dispatched, refused, expired or its client
// goes away. The stream is held meanwhile: nothing is sent to the gateway.

import (
	"context"
	"net/http"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Refusal reasons of flow control (flowcontrol.Outcome's names).
const (
	ReasonQueueFull       = "queue_full"           // 429: the request does not fit the queue's request or byte limits
	ReasonTTLExpired      = "ttl_expired"          // 429: the request waited its TTL while the pool was saturated
	ReasonFlowStopped     = "flow_control_stopped" // 503: the dispatcher is not running (shutting down, or a retired configuration)
	ReasonFlowNoEndpoints = ReasonNoEndpoints      // 503: the pool had no endpoint for noEndpointRequestTTL
)

// FlowController holds requests while the pool is saturated
// (Runtime.Flow). pkg/server implements it over a flowcontrol.Controller.
type FlowController interface {
	// Enqueue blocks until it is dispatched, refused or expired, or ctx
	// (the stream's) ends, and returns the outcome.
	Enqueue(ctx context.Context, it *flowcontrol.Item) flowcontrol.Outcome
	// Started is called once after every Enqueue, when the request it
	// returned was scheduled (its load is now counted by the saturation
	// detector) or will not be.
	Started(it *flowcontrol.Item)
	// Notify says the pool may have room: a request completed.
	Notify()
}

// FlowRecorder receives the flow-control metrics; a Recorder that
// implements it (metrics.Metrics does) gets them.
type FlowRecorder interface {
	// FlowWaiting adds delta (+1 when a request enters flow control, -1
	// when it leaves) and delta×bytes to the queue gauges of its flow.
	FlowWaiting(fairnessID string, priority int, model, target string, bytes int64, delta int)
	// FlowDone records a request's outcome (GIE's names: Dispatched,
	// RejectedCapacity, EvictedTTL, EvictedContextCancelled,
	// RejectedOther, EvictedOther), the time its enqueue took and its
	// whole time in flow control.
	FlowDone(fairnessID string, priority int, model, target, outcome string, enqueue, wait time.Duration)
}

// GIEOutcome is the outcome label GIE v1.5 gives a flow-control outcome
// (inference_extension_flow_control_request_queue_duration_seconds).
func GIEOutcome(o flowcontrol.Outcome, queued bool) string {
	switch o {
	case flowcontrol.Dispatched:
		return "Dispatched"
	case flowcontrol.RejectedQueueFull, flowcontrol.RejectedSaturated:
		return "RejectedCapacity"
	case flowcontrol.ExpiredTTL, flowcontrol.NoEndpoint:
		return "EvictedTTL"
	case flowcontrol.Cancelled:
		return "EvictedContextCancelled"
	}
	if queued {
		return "EvictedOther"
	}
	return "RejectedOther"
}

// flowID is the request's flow: its fairness id header, or else its model
// (one flow per model), or DefaultFairnessID.
func (st *stream) flowID(req *scheduling.Request) string {
	if id := st.headers[FairnessHeader]; id != "" {
		return id
	}
	if req.Model != "" {
		return req.Model
	}
	return DefaultFairnessID
}

// hold runs the request through flow control. It returns nil when the
// request may be scheduled (dispatched, or flow control is off), or the
// answer that ends the stream (a refusal; nothing when the client left).
// The caller must call st.flowStarted once it scheduled the request.
func (st *stream) hold() (out []*extprocv3.ProcessingResponse, done bool) {
	fc := st.rt.Flow
	if fc == nil {
		return nil, false
	}
	req := st.req
	st.flowItem = flowcontrol.Item{
		RequestID: st.reqID,
		Flow:      flowcontrol.FlowKey{ID: st.flowID(req), Priority: req.Priority},
		Bytes:     st.heldBytes(),
		Received:  st.start,
		Headers:   st.headers,
		Watcher:   st,
	}
	it := &st.flowItem
	start := st.s.now()
	o := fc.Enqueue(st.ctx, it)
	st.flow = fc
	queued := !it.EnqueueTime().IsZero()
	if fr := st.s.flowRec; fr != nil {
		enq := st.s.now().Sub(start)
		if queued {
			enq = it.EnqueueTime().Sub(start)
			// Queued raised the gauges: this request leaves them.
			fr.FlowWaiting(it.Flow.ID, it.Flow.Priority, req.Model, req.TargetModel, int64(it.Bytes), -1)
		}
		fr.FlowDone(it.Flow.ID, it.Flow.Priority, req.Model, req.TargetModel, GIEOutcome(o, queued), max(enq, 0), st.s.now().Sub(start))
	}
	if o == flowcontrol.Dispatched {
		if w := it.Wait(); w > 0 && st.log.V(3).Enabled() {
			st.log.V(3).Info("Released by flow control", "flow", it.Flow.String(), "wait", w)
		}
		return nil, false
	}
	st.flowStarted()
	st.req = nil // never scheduled: no completion hooks
	switch o {
	case flowcontrol.Cancelled:
		// The client went away while queued: nothing to answer.
		st.body = nil
		st.log.V(3).Info("Client left while queued by flow control", "flow", it.Flow.String(), "wait", it.Wait())
		return nil, true
	case flowcontrol.RejectedQueueFull:
		return st.refuse(&refusal{status: http.StatusTooManyRequests, reason: ReasonQueueFull, retryAfter: time.Second,
			message: "the flow-control queue is full; retry later"})
	case flowcontrol.RejectedSaturated:
		return st.refuse(&refusal{status: http.StatusTooManyRequests, reason: ReasonShedSaturation,
			message: "system saturated, sheddable request dropped"})
	case flowcontrol.ExpiredTTL:
		return st.refuse(&refusal{status: http.StatusTooManyRequests, reason: ReasonTTLExpired, retryAfter: time.Second,
			message: "the request waited " + it.Wait().Round(time.Millisecond).String() + " in the flow-control queue while the pool was saturated"})
	case flowcontrol.NoEndpoint:
		msg := "no ready endpoints in the pool"
		if w := it.Wait(); w > 0 {
			msg = "no endpoint appeared in the pool while the request waited " + w.Round(time.Millisecond).String()
		}
		return st.refuse(&refusal{status: http.StatusServiceUnavailable, reason: ReasonFlowNoEndpoints, message: msg})
	default:
		return st.refuse(&refusal{status: http.StatusServiceUnavailable, reason: ReasonFlowStopped,
			message: "flow control is not running (the endpoint picker is shutting down or reloading); retry"})
	}
}

// Queued is called by flow control once the request is in its queue
// (flowcontrol.Watcher), on the goroutine that runs hold. From here the
// queue's byte limits bound the body and what was parsed from it, so the
// stream gives its share of the buffer budget back; a request dispatched
// at once or refused keeps counting against the budget until the stream
// lets its body go, as without flow control. The queue gauges are raised
// here, not before Enqueue, so a refused request never shows in them.
func (st *stream) Queued(it *flowcontrol.Item) {
	st.release()
	if fr := st.s.flowRec; fr != nil {
		fr.FlowWaiting(it.Flow.ID, it.Flow.Priority, st.req.Model, st.req.TargetModel, int64(it.Bytes), 1)
	}
}

// queuedRequestOverhead is what a queued request holds besides its body,
// prompt and headers: its stream state, parsed request and flow item (a
// rough estimate; the e2e memory test's overhead factor covers the rest).
const queuedRequestOverhead = 512

// heldBytes is what a request holds while flow control keeps it: the
// buffered body (its capacity, which append may have doubled), the prompt
// parsed from it (text and chat messages are copies) and its headers.
// This, not the body's length alone as in GIE, is counted against
// flowControl.maxBytes, so that bound is a bound on the memory the queue
// makes the EPP hold.
func (st *stream) heldBytes() uint64 {
	n := cap(st.body) + queuedRequestOverhead
	if r := st.req; r != nil {
		n += len(r.Prompt.Text) + len(r.Prompt.CacheSalt)
		for i := range r.Prompt.Messages {
			m := &r.Prompt.Messages[i]
			n += len(m.Role) + len(m.Content) + 32
		}
	}
	for k, v := range st.headers {
		n += len(k) + len(v) + 16
	}
	return uint64(n)
}

// flowStarted tells flow control, once, that the request it dispatched
// was scheduled or refused.
func (st *stream) flowStarted() {
	if st.flow != nil {
		st.flow.Started(&st.flowItem)
		st.flow = nil
	}
}
