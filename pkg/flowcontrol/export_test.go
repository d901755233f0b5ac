package flowcontrol

import "time"

// Test access to the controller's steps, so that tests drive enqueue,
// dispatch, cancellation and expiry deterministically from one goroutine.

// NewStarted returns a controller that accepts items without Run.
func NewStarted(cfg Config, pool Pool) (*Controller, error) {
	c, err := New(cfg, pool)
	if err != nil {
		return nil, err
	}
	c.running.Store(true)
	return c, nil
}

// Admit queues it at now with TTL ttl (0: the configured default).
func (c *Controller) Admit(it *Item, now time.Time, ttl time.Duration) (Outcome, bool) {
	it.index = -1
	if ttl <= 0 {
		ttl = c.live.Load().ttl
	}
	return c.admit(it, now, ttl)
}

// DispatchOne is one dispatch step at saturation sat with eps endpoints.
func (c *Controller) DispatchOne(sat float64, eps int) *Item { return c.dispatchOne(sat, eps) }

// Cancel is the client leaving: the outcome the waiter returns.
func (c *Controller) Cancel(it *Item) Outcome { return c.finish(it, Cancelled) }

// Expire is it's timer firing.
func (c *Controller) Expire(it *Item) (Outcome, time.Duration) {
	return c.expire(it, it.ttl, c.live.Load().noEpTTL)
}

// Queued reports whether it waits in a queue.
func (it *Item) Queued() bool { return it.state == stateQueued }

// Outcome is its final outcome (valid once it left).
func (it *Item) Outcome() Outcome { return it.outcome }
