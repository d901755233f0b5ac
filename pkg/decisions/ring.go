package decisions

import (
	"sort"
	"sync/atomic"
)

// DefaultSize is the default number of records (--decision-buffer-size).
const DefaultSize = 1024

// MaxSize bounds --decision-buffer-size: a record is a few KiB at the
// default limits, so the largest ring stays within a few hundred MiB.
const MaxSize = 1 << 16

// DefaultLimit is how many records /debug/decisions returns when the
// query gives no limit (at most the ring's size).
const DefaultLimit = 100

// Ring is a fixed number of the latest Records. A nil *Ring records
// nothing, so callers need no check. Safe for concurrent use.
type Ring struct {
	slots []atomic.Pointer[Record]
	next  atomic.Uint64
}

// New returns a Ring of size records, nil (off) when size is 0. A size
// below 0 or above MaxSize is an error of the caller (the flag is
// validated), and is clamped here.
func New(size int) *Ring {
	if size <= 0 {
		return nil
	}
	return &Ring{slots: make([]atomic.Pointer[Record], min(size, MaxSize))}
}

// Size returns the number of records the ring keeps (0 for nil).
func (r *Ring) Size() int {
	if r == nil {
		return 0
	}
	return len(r.slots)
}

// Added returns how many records were ever added.
func (r *Ring) Added() uint64 {
	if r == nil {
		return 0
	}
	return r.next.Load()
}

// Add publishes rec, which must not be changed afterwards, replacing the
// oldest record once the ring is full. It sets rec.Seq. A writer that was
// preempted between taking its Seq and storing never overwrites a newer
// record that another writer stored in the same slot meanwhile: its
// record is dropped instead (it was already the oldest).
func (r *Ring) Add(rec *Record) {
	if r == nil || rec == nil {
		return
	}
	seq := r.next.Add(1) - 1
	rec.Seq = seq
	r.store(rec)
}

// store puts rec into its slot unless the slot holds a newer record.
func (r *Ring) store(rec *Record) {
	seq := rec.Seq
	slot := &r.slots[seq%uint64(len(r.slots))]
	for {
		old := slot.Load()
		if old != nil && old.Seq > seq {
			return
		}
		if slot.CompareAndSwap(old, rec) {
			return
		}
	}
}

// Filter selects records; empty fields match everything.
type Filter struct {
	// RequestID matches the record's request id.
	RequestID string
	// Model matches the client's, the target or the fallback model.
	Model string
	// Endpoint matches a chosen endpoint's name or host:port, a profile
	// run's target, or the gateway of the remote site a request went to.
	Endpoint string
	// Limit bounds the records returned, newest first; 0 means all.
	Limit int
}

// Snapshot returns the records that pass f, newest first. The records are
// shared: read them, never change them.
func (r *Ring) Snapshot(f Filter) []*Record {
	if r == nil {
		return nil
	}
	out := make([]*Record, 0, min(len(r.slots), 64))
	for i := range r.slots {
		if rec := r.slots[i].Load(); rec != nil && rec.matches(&f) {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq > out[j].Seq })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out
}
