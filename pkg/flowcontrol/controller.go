package flowcontrol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of Config.
const (
	// DefaultPollInterval is how often the dispatcher re-reads the pool
	// while items wait and nothing woke it.
	DefaultPollInterval = 5 * time.Millisecond
	// DefaultMaxBands bounds the number of bands (one per priority seen).
	DefaultMaxBands = 64
	// HardMaxRequests bounds the queued requests when Config.MaxRequests
	// is 0 (GIE's "no limit"): requests of size 0 are not held back by any
	// byte limit, and every waiting request holds a client stream.
	HardMaxRequests = 100_000
	// regimeRecheck is how often a waiting item whose current budget is
	// unbounded re-checks which budget applies.
	regimeRecheck = time.Second
)

// BandConfig configures one priority band (or, as Config.DefaultBand and
// Config.DefaultNegativeBand, the template of bands created for priorities
// not listed; their Priority is then ignored).
type BandConfig struct {
	Priority int
	// MaxRequests and MaxBytes bound the band's queued items; 0 means no
	// limit (the configuration layer applies GIE's 1 GB byte default).
	MaxRequests uint64
	MaxBytes    uint64
	// Fairness chooses among the band's flows; nil means GlobalStrict.
	Fairness FairnessPolicy
	// Ordering orders each flow; nil means FCFS.
	Ordering OrderingPolicy
}

// Config configures a Controller.
type Config struct {
	// MaxRequests and MaxBytes bound all queued items; 0 means no limit
	// (for requests: HardMaxRequests).
	MaxRequests uint64
	MaxBytes    uint64
	// DefaultRequestTTL bounds an item's wait while the pool has endpoints
	// when Item.TTL is 0; 0 means no bound but the context's deadline.
	DefaultRequestTTL time.Duration
	// NoEndpointRequestTTL bounds the wait while the pool has no endpoint;
	// 0 means no bound but the context's deadline. (The configuration layer
	// sets it to DefaultRequestTTL when omitted, as llm-d.)
	NoEndpointRequestTTL time.Duration
	// Bands are the configured bands; priorities must be distinct.
	Bands []BandConfig
	// DefaultBand is the template for other priorities >= 0, and for
	// negative ones when DefaultNegativeBand is nil.
	DefaultBand BandConfig
	// DefaultNegativeBand, when set, is the template for negative
	// priorities not in Bands, whose items then wait instead of being
	// refused while the pool is saturated.
	DefaultNegativeBand *BandConfig
	// UsageLimit sets each band's saturation ceiling; nil means
	// StaticUsageLimit{1.0}.
	UsageLimit UsageLimitPolicy
	// PollInterval: see DefaultPollInterval (0 means the default).
	PollInterval time.Duration
	// MaxBands: see DefaultMaxBands (0 means the default). An item whose
	// priority would need another band is refused with RejectedQueueFull.
	MaxBands int
	// Clock is the controller's clock; nil means the real clock.
	Clock clock.WithTicker
	// Observer, when set, is told about every dispatch cycle (for the
	// dispatch-cycle-time metric). It is fixed by New.
	Observer Observer
}

// Observer watches the dispatcher. Its methods are called from the
// dispatcher goroutine, without the controller's lock; they must be cheap
// and must not call the controller.
type Observer interface {
	// DispatchCycle reports one cycle: its duration and how many items it
	// released (a cycle runs while the pool has room and items wait).
	DispatchCycle(d time.Duration, dispatched int)
}

// Validate reports the first problem of c.
func (c *Config) Validate() error {
	seen := make(map[int]bool, len(c.Bands))
	for i, b := range c.Bands {
		if seen[b.Priority] {
			return fmt.Errorf("bands[%d].priority: duplicate priority %d", i, b.Priority)
		}
		seen[b.Priority] = true
	}
	switch {
	case c.DefaultRequestTTL < 0:
		return errors.New("defaultRequestTTL: must not be negative")
	case c.NoEndpointRequestTTL < 0:
		return errors.New("noEndpointRequestTTL: must not be negative")
	case c.PollInterval < 0:
		return errors.New("pollInterval: must not be negative")
	case c.MaxBands < 0:
		return errors.New("maxBands: must not be negative")
	case c.MaxBands > 0 && len(c.Bands) > c.MaxBands:
		return fmt.Errorf("bands: %d bands exceed maxBands %d", len(c.Bands), c.MaxBands)
	}
	return nil
}

// Controller queues items and dispatches them. Create it with New, run its
// dispatcher with Run, and call Enqueue from request goroutines.
type Controller struct {
	cfg      Config
	pool     Pool
	clock    clock.WithTicker
	maxBands int
	poll     time.Duration
	wake     chan struct{}
	observer Observer
	live     atomic.Pointer[live] // what Enqueue reads without the lock

	queued   atomic.Int64 // items queued (read lock-free by Enqueue's fast path)
	running  atomic.Bool
	outcomes [NumOutcomes]atomic.Uint64

	mu          sync.Mutex
	stopped     bool    // Run ended: refuse new items
	bands       []*Band // highest priority first
	byPriority  map[int]*Band
	explicit    map[int]BandConfig // the configured bands, by priority
	requests    uint64
	bytes       uint64
	seq         uint64
	saturation  float64
	endpoints   int
	noEndpoints bool // the last read found no endpoint
}

// New returns a Controller over pool. Call Run before Enqueue can queue.
func New(cfg Config, pool Pool) (*Controller, error) {
	if pool == nil {
		return nil, errors.New("flowcontrol: nil pool")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		pool:       pool,
		clock:      cfg.Clock,
		maxBands:   cfg.MaxBands,
		poll:       cfg.PollInterval,
		wake:       make(chan struct{}, 1),
		byPriority: make(map[int]*Band, len(cfg.Bands)),
		observer:   cfg.Observer,
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.maxBands == 0 {
		c.maxBands = DefaultMaxBands
	}
	if c.poll == 0 {
		c.poll = DefaultPollInterval
	}
	c.mu.Lock()
	c.applyLocked(cfg)
	c.mu.Unlock()
	return c, nil
}

// live is the part of the configuration Enqueue reads without the lock;
// it is replaced whole by Reconfigure.
type live struct {
	limit        UsageLimitPolicy
	negTemplate  bool
	negative     map[int]bool // configured negative priorities
	ttl, noEpTTL time.Duration
}

// applyLocked installs cfg (validated): limits, templates, policies, the
// configured bands (existing bands take their new configuration, their
// items re-ordered by it) and the lock-free part.
func (c *Controller) applyLocked(cfg Config) {
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = HardMaxRequests
	}
	if cfg.UsageLimit == nil {
		cfg.UsageLimit = StaticUsageLimit{Threshold: 1.0}
	}
	cfg.DefaultBand = withDefaults(cfg.DefaultBand)
	if cfg.DefaultNegativeBand != nil {
		nb := withDefaults(*cfg.DefaultNegativeBand)
		cfg.DefaultNegativeBand = &nb
	}
	l := &live{limit: cfg.UsageLimit, negTemplate: cfg.DefaultNegativeBand != nil, negative: map[int]bool{},
		ttl: cfg.DefaultRequestTTL, noEpTTL: cfg.NoEndpointRequestTTL}
	c.cfg = cfg
	explicit := map[int]BandConfig{}
	c.explicit = explicit
	for _, b := range cfg.Bands {
		explicit[b.Priority] = withDefaults(b)
		if b.Priority < 0 {
			l.negative[b.Priority] = true
		}
	}
	for _, b := range slices.Clone(c.bands) {
		bc, ok := explicit[b.cfg.Priority]
		if !ok {
			if b.requests == 0 {
				c.dropBandLocked(b)
				continue
			}
			bc = c.templateLocked(b.cfg.Priority)
		}
		b.cfg = bc
		for f := b.front; f != nil; f = f.next {
			for _, it := range f.items {
				it.key = bc.Ordering.OrderKey(it)
			}
			for i := len(f.items)/2 - 1; i >= 0; i-- {
				f.down(i)
			}
		}
	}
	for p, bc := range explicit {
		// Over MaxBands (bands of other priorities still hold items), a
		// configured band is created when its first item arrives.
		if _, ok := c.byPriority[p]; !ok && len(c.bands) < c.maxBands {
			c.addBandLocked(bc)
		}
	}
	c.live.Store(l)
}

// Reconfigure applies a new configuration (a reload) without dropping
// waiting items: limits, TTLs, templates and policies change for the items
// that arrive next; waiting items keep their TTLs and stay even where they
// exceed new limits, and are re-ordered by their band's new ordering
// policy. Clock, PollInterval and MaxBands keep their first values.
func (c *Controller) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	c.applyLocked(cfg)
	c.mu.Unlock()
	c.Notify()
	return nil
}

func withDefaults(b BandConfig) BandConfig {
	if b.Fairness == nil {
		b.Fairness = GlobalStrict{}
	}
	if b.Ordering == nil {
		b.Ordering = FCFS{}
	}
	return b
}

func (c *Controller) addBandLocked(cfg BandConfig) *Band {
	b := &Band{cfg: cfg, flows: make(map[string]*Flow)}
	i, _ := slices.BinarySearchFunc(c.bands, cfg.Priority, func(x *Band, p int) int { return p - x.cfg.Priority })
	c.bands = slices.Insert(c.bands, i, b)
	for j := i; j < len(c.bands); j++ {
		c.bands[j].index = j
	}
	c.byPriority[cfg.Priority] = b
	return b
}

// dropBandLocked removes the empty band b.
func (c *Controller) dropBandLocked(b *Band) {
	c.bands = slices.Delete(c.bands, b.index, b.index+1)
	for j := b.index; j < len(c.bands); j++ {
		c.bands[j].index = j
	}
	delete(c.byPriority, b.cfg.Priority)
}

// queues reports whether items of priority p wait (rather than being
// refused while saturated): every priority >= 0, and negative ones with a
// configured band or a negative-band template.
func (l *live) queues(p int) bool {
	return p >= 0 || l.negTemplate || l.negative[p]
}

// bandLocked returns the band of priority p, creating it from its
// configuration or template; nil if MaxBands bands exist. A band that is
// not configured is dropped again when it empties (removeLocked), so the
// cap counts bands that hold items, not priorities ever seen.
func (c *Controller) bandLocked(p int) *Band {
	if b, ok := c.byPriority[p]; ok {
		return b
	}
	if len(c.bands) >= c.maxBands {
		return nil
	}
	if bc, ok := c.explicit[p]; ok {
		return c.addBandLocked(bc)
	}
	return c.addBandLocked(c.templateLocked(p))
}

// templateLocked is the configuration of a band of priority p created from
// a template.
func (c *Controller) templateLocked(p int) BandConfig {
	tmpl := c.cfg.DefaultBand
	if p < 0 && c.cfg.DefaultNegativeBand != nil {
		tmpl = *c.cfg.DefaultNegativeBand
	}
	tmpl.Priority = p
	return tmpl
}

// Notify wakes the dispatcher: call it when the pool may have gained room
// (a request finished, metrics were refreshed). It never blocks.
func (c *Controller) Notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Enqueue admits it and blocks until it is dispatched, refused, expired or
// its context is cancelled, and returns the outcome. While nothing is
// queued and the pool has room for its priority it returns Dispatched at
// once, without locking. ctx's cancellation (the client disconnecting)
// removes the item from its queue at once; ctx's deadline counts as its TTL.
func (c *Controller) Enqueue(ctx context.Context, it *Item) Outcome {
	it.enqueued, it.finished, it.index, it.flow = time.Time{}, time.Time{}, -1, nil
	l := c.live.Load()
	p := it.Flow.Priority
	if c.queued.Load() == 0 && c.running.Load() {
		sat, eps := c.pool.Saturation()
		if eps > 0 && sat < l.limit.Ceiling(sat, p) {
			h, ok := c.pool.(Holder)
			if !ok || (!h.Held() && h.Hold(it)) {
				return c.count(Dispatched)
			}
		}
		if !l.queues(p) {
			// Sheddable with no band to wait in: no room (at or above
			// its band's ceiling, or a release pending) sheds it.
			if eps == 0 {
				return c.count(NoEndpoint)
			}
			return c.count(RejectedSaturated)
		}
	} else if c.running.Load() && !l.queues(p) {
		// Others wait: a sheddable request without a band of its own
		// never jumps them nor creates a band.
		return c.count(RejectedSaturated)
	}
	if err := ctx.Err(); err != nil {
		return c.count(ctxOutcome(ctx))
	}

	now := c.clock.Now()
	ttl := it.TTL
	if ttl <= 0 {
		ttl = l.ttl
	}
	noEpTTL := l.noEpTTL
	if dl, ok := ctx.Deadline(); ok {
		// The context's own deadline is enforced by ctx.Done; the TTL
		// seen by ordering policies is the shorter of the two.
		if d := dl.Sub(now); ttl <= 0 || d < ttl {
			ttl = d
		}
	}

	if o, queued := c.admit(it, now, ttl); !queued {
		return c.count(o)
	}
	if it.Watcher != nil {
		it.Watcher.Queued(it)
	}
	c.Notify()

	var timer clock.Timer
	var timerC <-chan time.Time
	arm := func(d time.Duration) {
		if timer == nil {
			timer = c.clock.NewTimer(d)
			timerC = timer.C()
		} else {
			timer.Reset(d)
		}
	}
	if first := minPositive(it.ttl, noEpTTL); first > 0 {
		arm(first)
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-it.done:
			o := it.outcome
			if o == Dispatched && ctx.Err() != nil {
				// Chosen at the instant its client left: never dispatched.
				o = ctxOutcome(ctx)
			}
			return c.count(o)
		case <-ctx.Done():
			return c.count(c.finish(it, ctxOutcome(ctx)))
		case <-timerC:
			o, next := c.expire(it, ttl, noEpTTL)
			if next == 0 {
				if o == Dispatched && ctx.Err() != nil {
					o = ctxOutcome(ctx)
				}
				return c.count(o)
			}
			arm(next)
		}
	}
}

// admit queues it, or returns why not (queued false).
func (c *Controller) admit(it *Item, now time.Time, ttl time.Duration) (Outcome, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || !c.running.Load() {
		return Stopped, false
	}
	band := c.bandLocked(it.Flow.Priority)
	if band == nil || !c.fitsLocked(band, it.Bytes) {
		return RejectedQueueFull, false
	}
	c.seq++
	it.seq = c.seq
	it.enqueued = now
	it.ttl = max(ttl, 0)
	if it.Received.IsZero() {
		it.Received = now
	}
	it.key = band.cfg.Ordering.OrderKey(it)
	it.state = stateQueued
	it.done = make(chan struct{})
	f := band.flows[it.Flow.ID]
	if f == nil {
		f = &Flow{key: it.Flow, band: band}
		band.flows[it.Flow.ID] = f
		band.pushBack(f)
	}
	it.flow = f
	f.push(it)
	band.requests++
	band.bytes += it.Bytes
	c.requests++
	c.bytes += it.Bytes
	c.queued.Add(1)
	if w, ok := it.Watcher.(QueueWatcher); ok {
		w.Entered(it)
	}
	return Dispatched, true
}

func ctxOutcome(ctx context.Context) Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ExpiredTTL
	}
	return Cancelled
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	default:
		return min(a, b)
	}
}

func (c *Controller) count(o Outcome) Outcome {
	c.outcomes[o].Add(1)
	return o
}

// fitsLocked reports whether an item of n bytes fits the global and band
// limits.
func (c *Controller) fitsLocked(b *Band, n uint64) bool {
	g, bc := &c.cfg, &b.cfg
	return (g.MaxRequests == 0 || c.requests+1 <= g.MaxRequests) &&
		(g.MaxBytes == 0 || c.bytes+n <= g.MaxBytes) &&
		(bc.MaxRequests == 0 || b.requests+1 <= bc.MaxRequests) &&
		(bc.MaxBytes == 0 || b.bytes+n <= bc.MaxBytes)
}

// expire handles it's timer: it returns the outcome and 0 if the budget of
// the current regime is spent, else the delay until the next check.
func (c *Controller) expire(it *Item, ttl, noEpTTL time.Duration) (Outcome, time.Duration) {
	c.mu.Lock()
	if it.state != stateQueued {
		c.mu.Unlock()
		<-it.done
		return it.outcome, 0
	}
	waited := c.clock.Since(it.enqueued)
	budget, o := it.ttl, ExpiredTTL
	if c.noEndpoints {
		budget, o = noEpTTL, NoEndpoint
	}
	if budget > 0 && waited >= budget {
		c.removeLocked(it, o)
		c.mu.Unlock()
		return o, 0
	}
	c.mu.Unlock()
	if budget > 0 {
		return o, budget - waited
	}
	// The current budget is unbounded; the other one is spent or longer.
	other := noEpTTL
	if c.noEndpoints {
		other = ttl
	}
	if other > waited {
		return o, min(other-waited, regimeRecheck)
	}
	return o, regimeRecheck
}

// finish removes it if it is still queued, with outcome o, and returns its
// outcome.
func (c *Controller) finish(it *Item, o Outcome) Outcome {
	c.mu.Lock()
	if it.state == stateQueued {
		c.removeLocked(it, o)
		c.mu.Unlock()
		return o
	}
	c.mu.Unlock()
	<-it.done
	if it.outcome == Dispatched {
		return o // the client left: it is not forwarded
	}
	return it.outcome
}

// removeLocked takes a queued item out with outcome o and releases its
// waiter.
func (c *Controller) removeLocked(it *Item, o Outcome) {
	f := it.flow
	b := f.band
	f.remove(it)
	if len(f.items) == 0 {
		b.unlink(f)
		delete(b.flows, f.key.ID)
	}
	b.requests--
	b.bytes -= it.Bytes
	if b.requests == 0 {
		if _, ok := c.explicit[b.cfg.Priority]; !ok {
			c.dropBandLocked(b)
		}
	}
	c.requests--
	c.bytes -= it.Bytes
	c.queued.Add(-1)
	if w, ok := it.Watcher.(QueueWatcher); ok {
		w.Left(it)
	}
	it.flow = nil
	it.state = stateFinal
	it.outcome = o
	it.finished = c.clock.Now()
	close(it.done)
}

// Run runs the dispatcher until ctx ends, then refuses every waiting item
// with Stopped. Call it once, in a goroutine the caller owns.
func (c *Controller) Run(ctx context.Context) {
	c.mu.Lock()
	c.stopped = false
	c.mu.Unlock()
	c.running.Store(true)
	// While items wait, the pool is re-read every poll interval (its
	// saturation changes without telling us); while none wait, only
	// Enqueue and Notify wake the dispatcher.
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		c.running.Store(false)
		c.mu.Lock()
		c.stopped = true
		for _, b := range slices.Clone(c.bands) {
			for b.front != nil {
				f := b.front
				for len(f.items) > 0 {
					c.removeLocked(f.items[len(f.items)-1], Stopped)
				}
			}
		}
		c.mu.Unlock()
	}()
	for {
		c.dispatch()
		var tick <-chan time.Time
		if c.queued.Load() > 0 {
			if timer == nil {
				timer = c.clock.NewTimer(c.poll)
			} else {
				timer.Reset(c.poll)
			}
			tick = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-tick:
		}
	}
}

// dispatch releases items while the pool has room.
func (c *Controller) dispatch() {
	if c.queued.Load() == 0 {
		return
	}
	start := c.clock.Now()
	n := 0
	for c.queued.Load() > 0 {
		sat, eps := c.pool.Saturation()
		if c.dispatchOne(sat, eps) == nil {
			break
		}
		n++
	}
	if c.observer != nil {
		c.observer.DispatchCycle(c.clock.Since(start), n)
	}
}

// dispatchOne releases the next item at saturation sat with eps endpoints
// and returns it, or nil if none may leave.
func (c *Controller) dispatchOne(sat float64, eps int) *Item {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saturation, c.endpoints, c.noEndpoints = sat, eps, eps == 0
	if eps == 0 {
		return nil
	}
	if h, ok := c.pool.(Holder); ok && h.Held() {
		return nil
	}
	it := c.selectLocked(sat)
	if it == nil {
		return nil
	}
	// The release slot is claimed here, for the item that leaves, not by
	// the fairness policy (whose flow selectLocked may still skip).
	if h, ok := c.pool.(Holder); ok && !h.Hold(it) {
		return nil // the fast path took the slot meanwhile
	}
	f := it.flow
	b := f.band
	c.removeLocked(it, Dispatched)
	if len(f.items) > 0 { // served: to the back of the band's ring
		b.unlink(f)
		b.pushBack(f)
	}
	return it
}

// selectLocked returns the next item to dispatch at saturation sat, or nil:
// the highest band with work, if it has room (head-of-line blocking), its
// fairness policy's flow, that flow's head.
func (c *Controller) selectLocked(sat float64) *Item {
	for _, b := range c.bands {
		if b.requests == 0 {
			continue
		}
		if sat >= c.cfg.UsageLimit.Ceiling(sat, b.cfg.Priority) {
			return nil
		}
		f := b.cfg.Fairness.Pick(b)
		if f == nil || f.band != b || len(f.items) == 0 {
			continue
		}
		return f.items[0]
	}
	return nil
}

// Stats returns a snapshot for metrics.
func (c *Controller) Stats() Stats {
	var s Stats
	for i := range s.Outcomes {
		s.Outcomes[i] = c.outcomes[i].Load()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.Requests, s.Bytes = c.requests, c.bytes
	s.MaxRequests, s.MaxBytes = c.cfg.MaxRequests, c.cfg.MaxBytes
	s.Saturation, s.Endpoints = c.saturation, c.endpoints
	s.Running = c.running.Load()
	s.Bands = make([]BandStats, len(c.bands))
	for i, b := range c.bands {
		s.Bands[i] = BandStats{Priority: b.cfg.Priority, Requests: b.requests, Bytes: b.bytes, Flows: len(b.flows),
			MaxRequests: b.cfg.MaxRequests, MaxBytes: b.cfg.MaxBytes}
	}
	return s
}

// FlowStats returns the active flows (those with waiting items), highest
// band first and, inside a band, least recently served first: the
// per-flow queue sizes behind llm-d's flow_control_queue_size (labels
// fairness_id and priority). It copies one entry per active flow, at most
// one per waiting item.
func (c *Controller) FlowStats() []FlowStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, b := range c.bands {
		n += len(b.flows)
	}
	out := make([]FlowStats, 0, n)
	for _, b := range c.bands {
		for f := b.front; f != nil; f = f.next {
			out = append(out, FlowStats{Key: f.key, Requests: uint64(len(f.items)), Bytes: f.bytes})
		}
	}
	return out
}
