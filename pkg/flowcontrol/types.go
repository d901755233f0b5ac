package flowcontrol

import (
	"net/http"
	"strconv"
	"time"
)

// FlowKey identifies a flow: the requests of one tenant (fairness id) at one
// priority.
type FlowKey struct {
	// ID is the fairness id (header x-gateway-inference-fairness-id; by
	// default one flow per model).
	ID string
	// Priority is the request's priority; higher is served first, negative
	// is sheddable.
	Priority int
}

// String returns "id@priority".
func (k FlowKey) String() string { return k.ID + "@" + strconv.Itoa(k.Priority) }

// Item is one request waiting for dispatch. The caller fills the exported
// fields and passes the Item to Controller.Enqueue; an Item is enqueued at
// most once at a time and must not be changed while Enqueue runs.
type Item struct {
	// RequestID is the request id, for logs.
	RequestID string
	// Flow is the request's flow: fairness id and priority.
	Flow FlowKey
	// Bytes is the memory the request holds while it waits (its buffered
	// body and what was parsed from it), counted against the byte limits.
	Bytes uint64
	// TTL bounds the wait while the pool has endpoints; 0 means
	// Config.DefaultRequestTTL. The context's deadline applies as well.
	TTL time.Duration
	// Received is when the request arrived (slo-deadline ordering counts
	// its budget from here); zero means the enqueue time.
	Received time.Time
	// Headers are the request headers, lower-case keys, read-only; ordering
	// policies may read them (slo-deadline reads x-llm-d-slo-ttft-ms).
	Headers map[string]string
	// Watcher, when set, is told once the item is queued, before Enqueue
	// blocks (never when Enqueue dispatches or refuses it at once).
	Watcher Watcher

	enqueued time.Time
	finished time.Time
	seq      uint64
	key      int64
	ttl      time.Duration // effective TTL with endpoints (0: none)
	flow     *Flow
	index    int // position in the flow's heap, -1 when not queued
	state    itemState
	outcome  Outcome
	done     chan struct{}
}

// Watcher follows an item into the queue: Queued is called on the
// goroutine of Enqueue, after the item was admitted (its bytes count
// against the limits) and before Enqueue waits; Enqueue returns after it.
type Watcher interface {
	Queued(it *Item)
}

// QueueWatcher is a Watcher that also keeps counts of the queue (gauges):
// when an item's Watcher implements it, Entered is called when the item is
// admitted and Left when it leaves the queue (dispatched, expired,
// cancelled or stopped), both under the Controller's lock, at the instant
// the item's bytes start and stop counting against the limits, so a count
// kept by them never differs from the Controller's. Both must be quick
// (atomic adds) and must not call the Controller.
type QueueWatcher interface {
	Watcher
	Entered(it *Item)
	Left(it *Item)
}

type itemState uint8

const (
	stateNew itemState = iota
	stateQueued
	stateFinal
)

// EnqueueTime is when Enqueue accepted the item (the controller's clock).
func (it *Item) EnqueueTime() time.Time { return it.enqueued }

// EffectiveTTL is the TTL that applies while the pool has endpoints: Item.TTL
// or Config.DefaultRequestTTL, shortened by the context's deadline; 0 means
// none. It is set when the item is queued.
func (it *Item) EffectiveTTL() time.Duration { return it.ttl }

// OrderKey is the key the band's ordering policy gave the item: lower keys
// leave their flow first, equal keys in enqueue order.
func (it *Item) OrderKey() int64 { return it.key }

// Seq is the item's enqueue sequence number (unique per controller,
// increasing).
func (it *Item) Seq() uint64 { return it.seq }

// Wait is how long the item waited: from EnqueueTime to its outcome. It is
// 0 for an item that was never queued.
func (it *Item) Wait() time.Duration {
	if it.enqueued.IsZero() || it.finished.IsZero() {
		return 0
	}
	return it.finished.Sub(it.enqueued)
}

// before reports whether a leaves its flow before b.
func (it *Item) before(b *Item) bool {
	if it.key != b.key {
		return it.key < b.key
	}
	return it.seq < b.seq
}

// Outcome is how an Enqueue ended.
type Outcome uint8

const (
	// Dispatched: the request may be scheduled and forwarded.
	Dispatched Outcome = iota
	// RejectedQueueFull: the request did not fit the request or byte limits.
	RejectedQueueFull
	// RejectedSaturated: a sheddable request arrived while the pool was
	// saturated.
	RejectedSaturated
	// ExpiredTTL: the request waited its TTL.
	ExpiredTTL
	// NoEndpoint: the request waited NoEndpointRequestTTL while the pool
	// had no endpoint.
	NoEndpoint
	// Cancelled: the request's context was cancelled while it waited.
	Cancelled
	// Stopped: the dispatcher was not running.
	Stopped

	// NumOutcomes is the number of outcomes (for arrays indexed by Outcome).
	NumOutcomes = int(Stopped) + 1
)

var outcomeNames = [NumOutcomes]string{"dispatched", "queue_full", "saturated", "ttl_expired", "no_endpoints", "cancelled", "flow_control_stopped"}

// String returns the outcome's name, which is also its refusal reason
// (x-switchyard-reason): dispatched, queue_full, saturated, ttl_expired,
// no_endpoints, cancelled, flow_control_stopped.
func (o Outcome) String() string {
	if int(o) < NumOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes returns every outcome, in order (a closed label set).
func Outcomes() []Outcome {
	out := make([]Outcome, NumOutcomes)
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}

// StatusCode is the HTTP status a refused request gets: 429 for
// queue_full, saturated and ttl_expired, 503 for no_endpoints, cancelled
// and flow_control_stopped, 0 for Dispatched.
func (o Outcome) StatusCode() int {
	switch o {
	case Dispatched:
		return 0
	case RejectedQueueFull, RejectedSaturated, ExpiredTTL:
		return http.StatusTooManyRequests
	default:
		return http.StatusServiceUnavailable
	}
}

// Pool is the dispatcher's view of the pool: the configured saturation
// detector over the pool's candidates. It is called on every dispatch
// attempt and by Enqueue while nothing is queued, so it must be cheap and
// must not block (read a snapshot).
type Pool interface {
	// Saturation returns the pool's saturation (below a band's ceiling,
	// 1.0 by default, there is room) and the number of endpoints that could
	// serve (0: none at all).
	Saturation() (saturation float64, endpoints int)
}

// Holder is an optional Pool extension for pools whose saturation lags a
// release (the load of a released request shows only once it is
// scheduled). While Held reports true the dispatcher releases nothing,
// whatever the band ceilings. Both ways out claim the release slot with
// Hold for the item that leaves: the fast path of Enqueue (it queues
// instead if Hold returns false) and the dispatcher, under its lock, once
// it has chosen the item it removes (it releases nothing if Hold returns
// false). One free slot thus admits at most one request until the pool
// has seen it start, and a claim always belongs to a released item.
type Holder interface {
	// Held reports whether a released request has not started yet.
	Held() bool
	// Hold registers it as released; false if a release is already
	// pending.
	Hold(it *Item) bool
}

// PoolFunc adapts a function to Pool.
type PoolFunc func() (float64, int)

// Saturation implements Pool.
func (f PoolFunc) Saturation() (float64, int) { return f() }

// Stats is a snapshot of the controller for metrics. It is a copy: the
// caller may keep it.
type Stats struct {
	// Requests and Bytes are the queued totals.
	Requests uint64
	Bytes    uint64
	// MaxRequests and MaxBytes are the global limits in force (MaxBytes 0:
	// none; MaxRequests is HardMaxRequests when none is configured).
	MaxRequests uint64
	MaxBytes    uint64
	// Bands are the bands that exist, highest priority first.
	Bands []BandStats
	// Outcomes counts every Enqueue by its outcome since New.
	Outcomes [NumOutcomes]uint64
	// Saturation and Endpoints are the pool's state at the last dispatch
	// attempt.
	Saturation float64
	Endpoints  int
	// Running reports whether the dispatcher runs.
	Running bool
}

// BandStats describes one priority band.
type BandStats struct {
	Priority    int
	Requests    uint64
	Bytes       uint64
	Flows       int
	MaxRequests uint64 // 0: none
	MaxBytes    uint64 // 0: none
}

// FlowStats describes one active flow.
type FlowStats struct {
	Key      FlowKey
	Requests uint64
	Bytes    uint64
}
