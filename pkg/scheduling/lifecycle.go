package scheduling

import (
	"context"
)

// CloseInfo tells a plugin instance being closed what happens to its
// name.
type CloseInfo struct {
	// Successor is true when an instance with the same name and type
	// serves in place of this one (a reload rebuilt it with other
	// parameters, or kept the previous instance and discards this
	// duplicate). Series labelled with the instance's name then belong to
	// the successor, which resolved the same children: leave them. When
	// false, nothing of that name and type serves any more: delete them.
	Successor bool
	// TypeServes is true when the configuration serving next has an
	// instance of this instance's type, under any name (Successor implies
	// it). A plugin whose state lives on the endpoints, shared by every
	// instance of its type (the circuit breaker's), leaves that state to
	// the one serving instead of resetting it.
	TypeServes bool
}

// Closer is implemented by plugins that hold something the garbage
// collector cannot reclaim on its own or should not wait for: metric
// series labelled with the instance, goroutines, large caches. See the
// package documentation (Lifecycle) for when Close is called and what it
// must release.
type Closer interface {
	Plugin
	// Close releases the instance's resources. It is called once. The
	// instance's Handle.Context is already done. Requests of the
	// configuration the instance belonged to may still be running and call
	// the instance during and after Close: it must stay safe (no panic,
	// no blocking) and should no longer grow state or update series.
	Close(CloseInfo)
}

// InstanceHandle is the Handle of one plugin instance: the shared
// BasicHandle of its configuration with a context of its own, cancelled
// when the host drops the instance (Cancel).
type InstanceHandle struct {
	*BasicHandle
	ctx    context.Context
	cancel context.CancelFunc
}

// ForInstance returns a Handle for one instance. Its Context is a child
// of the handle's Context, cancelled by Cancel.
func (h *BasicHandle) ForInstance() *InstanceHandle {
	ctx, cancel := context.WithCancel(h.ctx)
	return &InstanceHandle{BasicHandle: h, ctx: ctx, cancel: cancel}
}

// Context implements Handle: it lives as long as the instance.
func (h *InstanceHandle) Context() context.Context { return h.ctx }

// Cancel ends the instance's Context. It may be called more than once.
func (h *InstanceHandle) Cancel() { h.cancel() }

// Seal ends the construction phase of a configuration: Plugin finds no
// instance afterwards, so that a handle a plugin keeps does not keep the
// other instances of its configuration alive after they were dropped.
// Recorded parameters stay.
func (h *BasicHandle) Seal() {
	h.mu.Lock()
	h.plugins = nil
	h.mu.Unlock()
}

var _ Handle = (*InstanceHandle)(nil)
