package extproc

// The hold step of flow control: between parsing and scheduling, a
// request whose configuration has flow control on waits in the
// FlowController until it is dispatched, refused, expired or its client
// goes away. The stream is held meanwhile: nothing is sent to the gateway.

import (
	"context"
	"net/http"
	"time"
	"unsafe"

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
	st.traceFlowOutcome(GIEOutcome(o, queued))
	if fr := st.s.flowRec; fr != nil {
		enq := st.s.now().Sub(start)
		if queued {
			enq = it.EnqueueTime().Sub(start)
		}
		fr.FlowDone(it.Flow.ID, it.Flow.Priority, req.Model, req.TargetModel, GIEOutcome(o, queued), max(enq, 0), st.s.now().Sub(start))
	}
	if o == flowcontrol.Dispatched {
		if w := it.Wait(); w > 0 && st.v(3).Enabled() {
			st.v(3).Info("Released by flow control", "flow", it.Flow.String(), "wait", w)
		}
		return nil, false
	}
	st.flowStarted()
	st.req = nil // never scheduled: no completion hooks
	switch o {
	case flowcontrol.Cancelled:
		// The client went away while queued: nothing to answer.
		st.body = nil
		st.v(3).Info("Client left while queued by flow control", "flow", it.Flow.String(), "wait", it.Wait())
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
// lets its body go, as without flow control.
func (st *stream) Queued(*flowcontrol.Item) { st.release() }

// Entered and Left keep the queue gauges (flowcontrol.QueueWatcher): the
// controller calls them under its lock as the request's bytes start and
// stop counting against its limits, so the gauges equal its own counts at
// every instant (a refused request never shows in them). Only the flow's
// cached gauge children are updated (atomic adds).
func (st *stream) Entered(it *flowcontrol.Item) { st.flowGauges(it, 1) }

// Left: see Entered.
func (st *stream) Left(it *flowcontrol.Item) { st.flowGauges(it, -1) }

func (st *stream) flowGauges(it *flowcontrol.Item, delta int) {
	if fr := st.s.flowRec; fr != nil {
		fr.FlowWaiting(it.Flow.ID, it.Flow.Priority, st.req.Model, st.req.TargetModel, int64(it.Bytes), delta)
	}
}

// queuedRequestOverhead is what a queued request holds besides its
// request data (body, prompt, headers): its stream state, parsed request,
// flow item, gRPC stream state and the goroutine serving it, with its
// stack. TestQueuedRequestOverhead measures heap+stacks per queued stream
// with both of its ends in one process: about 32 KiB on linux/amd64
// (37 KiB with -race); the EPP's end is about half of that.
// flowControl.maxBytes counts request data plus this constant per queued
// request, so it bounds the memory the queue makes the EPP hold only as
// well as this estimate does.
const queuedRequestOverhead = 16 << 10

// heldBytes is what a request holds while flow control keeps it: the
// buffered body (its capacity, which append may have doubled), what was
// parsed from it and its headers. The prompt is counted only where it is
// a copy: a completions/embeddings prompt that is one unescaped string is
// a sub-slice of the body (pkg/requests, "Aliasing and copies"), already
// counted; a chat rendering is one buffer, which every Message.Content is
// a substring of. This, not the body's length alone as in GIE, is counted
// against flowControl.maxBytes.
func (st *stream) heldBytes() uint64 {
	n := cap(st.body) + queuedRequestOverhead
	if r := st.req; r != nil {
		n += ownedBytes(&r.Prompt, st.body)
	}
	for k, v := range st.headers {
		n += len(k) + len(v) + 16
	}
	return uint64(n)
}

// ownedBytes is what p holds beyond body: Text unless it aliases body,
// the Messages slice (every Content is a substring of Text) and CacheSalt.
func ownedBytes(p *scheduling.Prompt, body []byte) int {
	n := len(p.CacheSalt)
	if !aliases(p.Text, body) {
		n += cap(p.Text)
	}
	if len(p.Messages) > 0 {
		n += cap(p.Messages) * int(unsafe.Sizeof(scheduling.Message{}))
	}
	return n
}

// aliases reports whether b points into the backing array of in.
func aliases(b, in []byte) bool {
	if cap(b) == 0 || cap(in) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	s := uintptr(unsafe.Pointer(unsafe.SliceData(in)))
	return p >= s && p < s+uintptr(cap(in))
}

var _ flowcontrol.QueueWatcher = (*stream)(nil)

// flowStarted tells flow control, once, that the request it dispatched
// was scheduled or refused.
func (st *stream) flowStarted() {
	if st.flow != nil {
		st.flow.Started(&st.flowItem)
		st.flow = nil
	}
}
