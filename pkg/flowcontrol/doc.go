// Package flowcontrol holds requests in the EPP while the pool is
// saturated and releases them by priority and fairness, the semantics of
// GIE v1.5's flow control layer (gate "flowControl") and llm-d's
// extensions of it.
//
// # Model
//
// Every request is an Item with a FlowKey: its fairness id (the tenant,
// header x-gateway-inference-fairness-id) and its priority (from its
// InferenceObjective). Items of one priority share a priority Band; inside
// a band each fairness id has its own Flow, a queue kept in the order of
// the band's OrderingPolicy (fcfs, edf, slo-deadline). The dispatcher
// serves the highest band that has work first; inside a band its
// FairnessPolicy chooses the flow (global-strict: the best head across
// all flows; round-robin: flows in turn), and the flow's head leaves.
//
// A request is released as soon as the Pool reports room: its saturation
// is below the band's ceiling (UsageLimitPolicy; 1.0 by default, as GIE's
// static-usage-limit-policy). When the highest band with work has no room,
// nothing lower is released either (head-of-line blocking, as in GIE: work
// of lower priority must not deepen the saturation that holds back work of
// higher priority).
//
// # Outcomes
//
// Controller.Enqueue blocks until its item is dispatched, refused or gone:
//
//   - Dispatched: the caller schedules and forwards the request.
//   - RejectedQueueFull (429 queue_full): the item does not fit the global
//     or its band's request or byte limit; refused at once, never queued.
//   - RejectedSaturated (429 saturated): a sheddable item (priority < 0)
//     arrived while the pool is saturated and no band is configured for
//     negative priorities (see below).
//   - ExpiredTTL (429 ttl_expired): it waited its TTL (Item.TTL, else
//     Config.DefaultRequestTTL, or the context's deadline) while the pool
//     had endpoints.
//   - NoEndpoint (503 no_endpoints): it waited Config.NoEndpointRequestTTL
//     while the pool had no endpoint at all (llm-d's scale-from-zero
//     waiting room). Which budget applies is decided when it runs out, so a
//     pool that gains or loses endpoints moves its waiting items to the
//     other budget.
//   - Cancelled: the context was cancelled (the client went away); the
//     item leaves its queue at once and is never dispatched, even if the
//     dispatcher chose it at the same instant.
//   - Stopped (503): the dispatcher is not running (Run returned).
//
// # Sheddable requests
//
// GIE v1.5 sheds a request with a negative priority (429) when the pool is
// saturated, before scheduling; llm-d later added
// flowControl.defaultNegativePriorityBand, a band template for negative
// priorities that queues them instead. Switchyard does both: a sheddable
// item is refused with RejectedSaturated while the pool is saturated,
// unless Config.DefaultNegativeBand is set or a band of its priority is
// configured explicitly (Config.Bands); then it waits in that band like
// any other item, and is served after every higher band.
//
// # Cost and bounds
//
// While nothing is queued, Enqueue takes no lock: it reads the Pool and
// returns Dispatched when there is room. Queued items are held under one
// mutex; enqueue and removal cost O(log n) in the flow's queue, a dispatch
// costs O(bands) plus the fairness policy's pick (O(1) for round-robin,
// O(active flows) for global-strict). Queued items are bounded by the
// request and byte limits (HardMaxRequests when no request limit is
// configured); flows exist only while they hold items; bands are bounded
// by Config.MaxBands, and a band that is not configured exists only while
// it holds items. With a Holder pool (the server's), one free slot
// releases one request until the pool has seen it start, on the fast path
// too.
//
// # Reloads
//
// Controller.Reconfigure installs a reloaded configuration without dropping
// waiting items: new limits, TTLs, templates and policies apply to the
// items that arrive next; waiting items keep their TTLs, stay where they
// exceed new limits, and are re-ordered by their band's new ordering
// policy.
//
// An item's priority is fixed when it is enqueued (pkg/extproc reads it
// from the request's InferenceObjective on arrival): an objective's
// priority changed or deleted by a reload does not move or shed the
// items already queued; they stay in their band and are released in its
// order.
//
// # Goroutines
//
// The dispatcher runs in the goroutine that calls Run, and returns when
// its context ends, refusing every waiting item with Stopped. Enqueue
// starts no goroutine: each waiting caller owns a timer for its TTL.
package flowcontrol
