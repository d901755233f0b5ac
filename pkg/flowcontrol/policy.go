package flowcontrol

// OrderingPolicy orders the items of one flow. The controller calls
// OrderKey once per item, when it is queued (EnqueueTime, EffectiveTTL,
// Received and Headers are set); lower keys leave first, equal keys in
// enqueue order. It must be cheap, must not block and must be safe for
// concurrent use. Every flow of a band uses the band's policy, so keys of
// one band are comparable across its flows.
type OrderingPolicy interface {
	OrderKey(it *Item) int64
}

// FairnessPolicy chooses which flow of a band is served next. Pick is
// called by the dispatcher with the controller's lock held, only for a
// band with at least one active flow; it must not block and must not call
// the controller. It returns one of band's flows, or nil to serve none of
// them in this attempt.
type FairnessPolicy interface {
	Pick(band *Band) *Flow
}

// UsageLimitPolicy sets, per band, the saturation up to which the band may
// dispatch: a band dispatches while saturation < Ceiling(saturation,
// priority). It is called on every dispatch attempt and must be cheap.
type UsageLimitPolicy interface {
	Ceiling(saturation float64, priority int) float64
}

// Band is a priority band as fairness policies see it. Its methods may only
// be called from FairnessPolicy.Pick.
type Band struct {
	cfg      BandConfig
	flows    map[string]*Flow // active flows by fairness id
	front    *Flow            // active flows, least recently served first
	back     *Flow
	requests uint64
	bytes    uint64
	index    int // position in Controller.bands
}

// Priority is the band's priority.
func (b *Band) Priority() int { return b.cfg.Priority }

// Len is the number of items queued in the band.
func (b *Band) Len() int { return int(b.requests) }

// Bytes is the size of the items queued in the band.
func (b *Band) Bytes() uint64 { return b.bytes }

// NumFlows is the number of active flows (flows with queued items).
func (b *Band) NumFlows() int { return len(b.flows) }

// Front is the active flow served least recently (a flow that became
// active is at the back; a served flow moves to the back), nil if none.
func (b *Band) Front() *Flow { return b.front }

// Flows calls fn for each active flow from Front to back until fn returns
// false.
func (b *Band) Flows(fn func(*Flow) bool) {
	for f := b.front; f != nil; f = f.next {
		if !fn(f) {
			return
		}
	}
}

func (b *Band) pushBack(f *Flow) {
	f.prev, f.next = b.back, nil
	if b.back != nil {
		b.back.next = f
	} else {
		b.front = f
	}
	b.back = f
}

func (b *Band) unlink(f *Flow) {
	if f.prev != nil {
		f.prev.next = f.next
	} else {
		b.front = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	} else {
		b.back = f.prev
	}
	f.prev, f.next = nil, nil
}

// Flow is one flow's queue in a band, as fairness policies see it.
type Flow struct {
	key        FlowKey
	band       *Band
	items      []*Item // binary heap by Item.before
	bytes      uint64
	prev, next *Flow
}

// Key is the flow's key.
func (f *Flow) Key() FlowKey { return f.key }

// Len is the number of items queued in the flow.
func (f *Flow) Len() int { return len(f.items) }

// Bytes is the size of the items queued in the flow.
func (f *Flow) Bytes() uint64 { return f.bytes }

// Head is the item the flow serves next, nil if it is empty.
func (f *Flow) Head() *Item {
	if len(f.items) == 0 {
		return nil
	}
	return f.items[0]
}

func (f *Flow) push(it *Item) {
	it.index = len(f.items)
	f.items = append(f.items, it)
	f.up(it.index)
	f.bytes += it.Bytes
}

func (f *Flow) remove(it *Item) {
	i := it.index
	n := len(f.items) - 1
	if i != n {
		f.swap(i, n)
	}
	f.items[n] = nil
	f.items = f.items[:n]
	if i != n {
		if !f.down(i) {
			f.up(i)
		}
	}
	it.index = -1
	f.bytes -= it.Bytes
}

func (f *Flow) swap(i, j int) {
	f.items[i], f.items[j] = f.items[j], f.items[i]
	f.items[i].index = i
	f.items[j].index = j
}

func (f *Flow) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !f.items[j].before(f.items[i]) {
			break
		}
		f.swap(i, j)
		j = i
	}
}

func (f *Flow) down(i0 int) bool {
	i, n := i0, len(f.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && f.items[r].before(f.items[l]) {
			j = r
		}
		if !f.items[j].before(f.items[i]) {
			break
		}
		f.swap(i, j)
		i = j
	}
	return i > i0
}

// FCFS is the default ordering policy (fcfs-ordering-policy): items leave
// in the order they were enqueued.
type FCFS struct{}

// OrderKey implements OrderingPolicy: the enqueue time.
func (FCFS) OrderKey(it *Item) int64 { return it.EnqueueTime().UnixNano() }

// GlobalStrict is the default fairness policy
// (global-strict-fairness-policy): the flow whose head item comes first
// under the band's ordering policy, across all flows, as if the band were
// one queue. Ties go to the flow served least recently. O(active flows).
type GlobalStrict struct{}

// Pick implements FairnessPolicy.
func (GlobalStrict) Pick(band *Band) *Flow {
	var best *Flow
	for f := band.front; f != nil; f = f.next {
		if best == nil || f.items[0].before(best.items[0]) {
			best = f
		}
	}
	return best
}

// RoundRobin (round-robin-fairness-policy) serves the band's active flows
// in turn, one item each: the flow served least recently goes next. O(1).
type RoundRobin struct{}

// Pick implements FairnessPolicy.
func (RoundRobin) Pick(band *Band) *Flow { return band.front }

// StaticUsageLimit (static-usage-limit-policy) lets every band dispatch
// while saturation is below Threshold (GIE's default threshold is 1.0).
type StaticUsageLimit struct{ Threshold float64 }

// Ceiling implements UsageLimitPolicy.
func (s StaticUsageLimit) Ceiling(float64, int) float64 { return s.Threshold }

var (
	_ OrderingPolicy   = FCFS{}
	_ FairnessPolicy   = GlobalStrict{}
	_ FairnessPolicy   = RoundRobin{}
	_ UsageLimitPolicy = StaticUsageLimit{}
)
