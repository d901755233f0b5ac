package learner

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

// Health is the source of health demotion (G-21, G-56): the remote-gateway
// prober (pkg/multisite/gwhealth) implements it. Demoted reports whether
// the site's gateway, at the address the topology gives it now, is not
// known to be up (never probed, failing, or probed at another address).
// It is called once per remote site per control step, so it must be cheap
// and must not block.
type Health interface {
	Demoted(site, gateway string) bool
}

// Options configure a Learner.
type Options struct {
	// Settings are the availability settings; the zero value is not
	// valid: start from DefaultSettings. New does not validate them (the
	// configuration loader does).
	Settings Settings
	// Health demotes remote sites; nil demotes nothing.
	Health Health
	// Metrics receives the grid_route_site_* and grid_route_shedding
	// gauges; nil sets none.
	Metrics *Metrics
	// Logger receives the learner's logs (V(1): shedding starts and
	// stops). The zero value discards.
	Logger logr.Logger
}

// Learner is the control step (seed-requirements.md §2.12): Step turns
// the site store's snapshot and the topology into one immutable
// sitestate.Snapshot, published in the Holder. It keeps, per (site,
// cluster, provider), the bounds learned in the provider's current
// generation, and per site the smoothed rho, the silence judgement and
// the full/room clocks; per model the shedding state. Step is safe to
// call from several goroutines (it serializes); it is never on the
// request path.
type Learner struct {
	holder sitestate.Holder

	mu      sync.Mutex
	set     Settings
	health  Health
	metrics *Metrics
	log     logr.Logger
	sites   map[string]*siteLearn
	shed    map[string]bool // model (or OtherModels) → shed
	version uint64
	cutWarn bool
}

// New returns a learner with no state; its Holder is empty until the
// first Step.
func New(opts Options) *Learner {
	return &Learner{
		set:     opts.Settings,
		health:  opts.Health,
		metrics: opts.Metrics,
		log:     opts.Logger,
		sites:   map[string]*siteLearn{},
		shed:    map[string]bool{},
	}
}

// Holder is where the snapshots are published; the site stage reads it.
func (l *Learner) Holder() *sitestate.Holder { return &l.holder }

// Settings returns the settings the learner runs with.
func (l *Learner) Settings() Settings {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set
}

// SetSettings replaces the settings (a configuration reload) from the
// next Step on; what was learned stays. Turning shedding off clears the
// shedding state at the next Step.
func (l *Learner) SetSettings(s Settings) {
	l.mu.Lock()
	l.set = s
	l.mu.Unlock()
}

// siteLearn is what the learner keeps of one site between steps.
type siteLearn struct {
	cluster   string
	providers map[string]*provLearn

	// lastStamp is the newest load stamp of the site already taken as a
	// sample (the relay's clock).
	lastStamp time.Time
	// rho is the smoothed combined rho; rhoKnown false before the first
	// sample that had one.
	rho      float64
	rhoKnown bool

	// silent is the sticky silence judgement; streak counts the new
	// samples with no full window between them since it set in (G-44).
	silent bool
	streak int
	// firstRound is the first round end this learner saw for the peer
	// (G-46's "a full window of rounds").
	firstRound time.Time

	// atLimit: the latest sample was at the ceiling with work waiting;
	// limitSince is the stamp of the first sample of that run, lastLimit
	// of the latest such sample (G-16, G-62).
	atLimit               bool
	limitSince, lastLimit time.Time
	// emptied: the latest sample had nothing queued and nothing held by
	// flow control (G-62's "emptied queue": room at once).
	emptied bool

	// queue is the recent (stamp, depth) readings, for the windowed worst
	// queue (G-36); bounded by maxQueueHistory.
	queue []queueReading
}

type queueReading struct {
	at    time.Time
	depth float64
}

// maxQueueHistory bounds the queue readings kept per site (a window's
// worth at one sample a second is 6).
const maxQueueHistory = 64

// provLearn is the learning state of one provider in one generation.
type provLearn struct {
	gen      uint64
	genSince time.Time
	learning bool // the provider has a generation row
	// soft, hard are NaN while unlearned; at is the stamp they were last
	// decayed to.
	soft, hard float64
	at         time.Time
	lastStamp  time.Time
}

func (p *provLearn) reset() {
	p.soft, p.hard, p.at, p.lastStamp = math.NaN(), math.NaN(), time.Time{}, time.Time{}
}

// ceiling is max(floor, min(soft, hard)) (G-13, §2.11 #1), NaN while
// nothing is learned.
func (p *provLearn) ceiling(floor float64) float64 {
	if !p.learning {
		return math.NaN()
	}
	switch s, h := p.soft, p.hard; {
	case math.IsNaN(s) && math.IsNaN(h):
		return math.NaN()
	case math.IsNaN(h):
		return math.Max(floor, s)
	case math.IsNaN(s):
		return math.Max(floor, h)
	default:
		return math.Max(floor, math.Min(s, h))
	}
}

// decay moves the bounds to stamp t: the soft bound decays toward the
// floor, the hard bound relaxes upward (doubles every half-life), both
// with the ceiling half-life (G-13).
func (p *provLearn) decay(t time.Time, floor float64, halfLife time.Duration) {
	if p.at.IsZero() || !t.After(p.at) {
		if p.at.IsZero() {
			p.at = t
		}
		return
	}
	f := math.Exp2(-float64(t.Sub(p.at)) / float64(halfLife))
	if !math.IsNaN(p.soft) && p.soft > floor {
		p.soft = floor + (p.soft-floor)*f
	}
	if !math.IsNaN(p.hard) {
		p.hard = math.Min(p.hard/f, maxBound)
	}
	p.at = t
}

// maxBound caps a relaxed hard bound (far above any real in-flight).
const maxBound = 1e12

// epsilon absorbs the rounding of averaged gauges: a queue of 0.9999999
// requests is one whole request.
const epsilon = 1e-9

// load is what a provider's (or a site's) latest readings say.
type load struct {
	inFlight float64 // G-05
	queued   float64 // whole requests waiting: queue × ready + flow control
	flow     float64
	ready    float64
	queue    float64 // queue × ready
	kv       float64 // NaN without a reading
}

// providerLoad reads one provider's gauges (read by the relay at one
// instant, G-05): in-flight = (running + queue) × ready + flow control.
func providerLoad(p *sitestore.Provider) load {
	ld := load{kv: math.NaN()}
	if p.Ready.Known() {
		ld.ready = p.Ready.Value
	}
	if p.FlowControl.Known() {
		ld.flow = p.FlowControl.Value
	}
	var running, queue float64
	if p.Running.Known() {
		running = p.Running.Value
	}
	if p.Queue.Known() {
		queue = p.Queue.Value
	}
	ld.queue = queue * ld.ready
	ld.inFlight = (running+queue)*ld.ready + ld.flow
	ld.queued = ld.queue + ld.flow
	if p.KVCache.Known() {
		ld.kv = p.KVCache.Value
	}
	return ld
}

// waiting is G-11's "work waiting": at least one whole request queued at
// the site or held by flow control.
func (ld load) waiting() bool { return ld.queued >= 1-epsilon }

// Step runs the control step at now (the EPP's clock, stamped on the
// snapshot) over the site store's snapshot sn and the topology top,
// publishes the result in the Holder, sets the gauges and returns it.
// Silence, freshness and the full/room clocks are judged on the relay's
// clock (the stamps, the Date of the last read and the peers' round
// ends), never on now, so a stalled poll pauses the judgement (G-41).
func (l *Learner) Step(now time.Time, top *topology.Topology, sn *sitestore.Snapshot) *sitestate.Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	tsites := top.Sites()
	if len(tsites) > sitestate.MaxSites {
		if !l.cutWarn {
			l.log.Info("The topology has more sites than one request draws among; keeping the first by name", "sites", len(tsites), "kept", sitestate.MaxSites)
			l.cutWarn = true
		}
		tsites = tsites[:sitestate.MaxSites]
	}
	l.version++
	out := &sitestate.Snapshot{Version: l.version, At: now, Sites: make([]sitestate.Site, 0, len(tsites))}
	keep := make(map[string]bool, len(tsites))
	var known []string
	for i := range tsites {
		ts := &tsites[i]
		keep[ts.Name] = true
		var ss *sitestore.Site
		if sn != nil {
			ss, _ = sn.Site(ts.Name)
		}
		out.Sites = append(out.Sites, l.stepSite(ts, ss, sn))
		if len(ts.Models) == 0 {
			out.AnyModel = true
		}
		known = append(known, ts.Models...)
	}
	for name := range l.sites {
		if !keep[name] {
			delete(l.sites, name)
		}
	}
	slices.Sort(known)
	out.Known = slices.Compact(known)
	applyExploreFloor(out.Sites, l.set.ExploreFloor)
	l.decideShedding(out)
	l.holder.Store(out)
	if l.metrics != nil {
		l.metrics.set(out, l.shed)
	}
	return out
}

// stepSite judges one site (§2.12 control step, point 2, in its order).
func (l *Learner) stepSite(ts *topology.Site, ss *sitestore.Site, sn *sitestore.Snapshot) sitestate.Site {
	set := &l.set
	window := set.FreshnessWindow()
	sl := l.sites[ts.Name]
	if sl == nil || sl.cluster != ts.Cluster {
		sl = &siteLearn{cluster: ts.Cluster, providers: map[string]*provLearn{}}
		l.sites[ts.Name] = sl
	}
	st := sitestate.Site{
		Name: ts.Name, Cluster: ts.Cluster, Local: ts.Local, Gateway: ts.Gateway, Models: ts.Models,
		CeilingSoft: math.NaN(), CeilingHard: math.NaN(), Ceiling: math.NaN(),
		RhoCounted: math.NaN(), RhoReported: math.NaN(), InFlight: math.NaN(), Rho: math.NaN(),
	}
	var provs []sitestore.Provider
	if ss != nil {
		provs = ss.Providers
	}

	// Readiness (G-20): unready when the latest ready-endpoint count of
	// every provider that reported one is 0. The verdict survives
	// silence, and clears on a newer sample that omits the readiness
	// row. A site the EPP cannot route to is not admitted.
	readyKnown, anyReady := false, false
	for i := range provs {
		p := &provs[i]
		switch {
		case p.Ready.Known() && !p.Ready.Stamp.Before(p.Stamp):
			readyKnown = true
			anyReady = anyReady || p.Ready.Value > 0
		case p.Ready.Known() || !p.Stamp.IsZero():
			// A sample newer than the readiness row.
			readyKnown, anyReady = true, true
		}
	}
	st.Ready = ts.Routable() && (!readyKnown || anyReady)

	// Publishes-load (G-47) and telemetry (G-23).
	var stamp time.Time
	for i := range provs {
		p := &provs[i]
		if p.PublishesLoadKnown() {
			st.PublishesLoad = true
		}
		if p.Stamp.After(stamp) {
			stamp = p.Stamp
		}
	}
	st.Telemetry = !stamp.IsZero()
	newSample := stamp.After(sl.lastStamp)

	// The judgement clock (G-41, G-42): the local site at the last read
	// of the relay (its Date), a peer at the end of the relay's last
	// round that tried it; a peer without rounds is not judged.
	var judge time.Time
	judged := false
	switch {
	case ts.Local:
		if sn != nil && !sn.Date.IsZero() {
			judge, judged = sn.Date, true
		}
	case ss != nil && ss.RoundsKnown && !ss.RoundEnd.IsZero():
		judge, judged = ss.RoundEnd, true
		if sl.firstRound.IsZero() {
			sl.firstRound = ss.RoundEnd
		}
	}
	// Freshness is read on the same clock; a peer that is not judged is
	// read at the last Date.
	freshAt := judge
	if !judged && sn != nil {
		freshAt = sn.Date
	}

	// Silence (G-40, G-44, G-46).
	if newSample {
		if !sl.lastStamp.IsZero() && stamp.Sub(sl.lastStamp) <= window {
			sl.streak++
		} else {
			sl.streak = 1
		}
	}
	base := false
	if judged {
		switch {
		case st.Telemetry:
			base = judge.Sub(stamp) > window
		case st.PublishesLoad && !ts.Local:
			base = judge.Sub(sl.firstRound) > window
		}
	}
	switch {
	case !sl.silent && base:
		sl.silent, sl.streak = true, 0
	case sl.silent && !base && sl.streak >= 2:
		sl.silent = false
	}
	if !st.Telemetry && (ts.Local || !st.PublishesLoad) {
		// Nothing ever published, and not a load-publishing peer (G-46):
		// never silent (a fallback, G-23).
		sl.silent = false
	}
	st.Silent = sl.silent

	// In-flight, bounds and ceiling, per provider generation (G-05,
	// G-10 … G-13).
	l.learnProviders(sl, provs)
	var site load
	site.kv = math.NaN()
	var learnedInFlight, soft, hard, ceiling float64
	nSoft, nHard, nCeil := 0, 0, 0
	for i := range provs {
		p := &provs[i]
		if p.Stamp.IsZero() {
			continue
		}
		ld := providerLoad(p)
		site.inFlight += ld.inFlight
		site.queued += ld.queued
		site.queue += ld.queue
		site.flow += ld.flow
		site.ready += ld.ready
		if !math.IsNaN(ld.kv) && (math.IsNaN(site.kv) || ld.kv > site.kv) {
			site.kv = ld.kv
		}
		pl := sl.providers[p.Name]
		if c := pl.ceiling(set.CeilingFloor); !math.IsNaN(c) {
			ceiling += c
			learnedInFlight += ld.inFlight
			nCeil++
			if !math.IsNaN(pl.soft) {
				soft += pl.soft
				nSoft++
			}
			if !math.IsNaN(pl.hard) {
				hard += pl.hard
				nHard++
			}
		}
	}
	if st.Telemetry {
		st.InFlight = site.inFlight
		st.Queued = site.waiting()
	}
	if nSoft > 0 {
		st.CeilingSoft = soft
	}
	if nHard > 0 {
		st.CeilingHard = hard
	}
	if nCeil > 0 {
		st.Ceiling = ceiling
		st.Capacity, st.CapacityKnown = ceiling, true
	}

	// rho (G-14): counted = in-flight / ceiling, reported = KV-cache
	// utilisation, combined by max, smoothed per new sample.
	if nCeil > 0 {
		st.RhoCounted = learnedInFlight / ceiling
	}
	st.RhoReported = site.kv
	raw := math.NaN()
	switch {
	case !math.IsNaN(st.RhoCounted) && !math.IsNaN(st.RhoReported):
		raw = math.Max(st.RhoCounted, st.RhoReported)
	case !math.IsNaN(st.RhoCounted):
		raw = st.RhoCounted
	case !math.IsNaN(st.RhoReported):
		raw = st.RhoReported
	}
	if newSample && !math.IsNaN(raw) {
		if sl.rhoKnown {
			sl.rho += set.Smoothing * (raw - sl.rho)
		} else {
			sl.rho, sl.rhoKnown = raw, true
		}
	}
	if sl.rhoKnown {
		st.Rho = sl.rho
		// Room is judged on the latest retained rho (G-15, §2.11 #16).
		st.Room = sl.rho < 1
		st.RhoFresh = !st.Silent && !freshAt.IsZero() && freshAt.Sub(stamp) <= window
	}

	// Queue depth: the worst queue reading inside the window (G-36).
	if newSample {
		if len(sl.queue) == maxQueueHistory {
			sl.queue = slices.Delete(sl.queue, 0, 1)
		}
		sl.queue = append(sl.queue, queueReading{at: stamp, depth: site.queued})
	}
	if st.Telemetry {
		cut := 0
		for cut < len(sl.queue) && stamp.Sub(sl.queue[cut].at) > window {
			cut++
		}
		sl.queue = slices.Delete(sl.queue, 0, cut)
		for _, q := range sl.queue {
			st.QueueDepth = math.Max(st.QueueDepth, q.depth)
		}
	}

	// Full (G-16): at the ceiling with work waiting (queue_full per
	// serving unit, or any flow-control hold) for full_after_ms, on the
	// samples' stamps. The ceiling is the learned providers' only, so it
	// is compared with their in-flight only, as rho_counted is.
	if newSample {
		at := nCeil > 0 && learnedInFlight >= ceiling-epsilon && site.fullWaiting(set.QueueFull)
		if at {
			if !sl.atLimit {
				sl.limitSince = stamp
			}
			sl.lastLimit = stamp
		}
		sl.atLimit = at
		sl.emptied = site.queued < epsilon && site.flow == 0
	}
	st.Full = st.Telemetry && sl.atLimit && stamp.Sub(sl.limitSince) >= ms(set.FullAfterMs)

	// Demotion (G-21): only remote sites are probed.
	if !ts.Local && l.health != nil {
		st.Demoted = l.health.Demoted(ts.Name, ts.Gateway)
	}
	if newSample {
		sl.lastStamp = stamp
	}
	return st
}

// fullWaiting is G-16's "work waiting": queue_full per serving unit, or
// any flow-control hold.
func (ld load) fullWaiting(queueFull float64) bool {
	if ld.flow >= 1-epsilon {
		return true
	}
	return ld.ready > 0 && ld.queue/ld.ready >= queueFull-epsilon
}

// relieved reports whether the site shows room for G-62: its latest
// sample has an emptied queue (nothing queued, nothing held: room at
// once), or no sample has been at the limit for room_after_ms. "Emptied"
// is not "less than one whole request waiting": with a queue_full under
// 1 a site can be at the limit with less than that, and counting it as
// room would flip shedding every control step.
func (sl *siteLearn) relieved(roomAfter time.Duration) bool {
	if sl.emptied {
		return true
	}
	return !sl.atLimit && sl.lastStamp.Sub(sl.lastLimit) >= roomAfter
}

// learnProviders follows each provider's generation and takes its new
// samples into its bounds.
func (l *Learner) learnProviders(sl *siteLearn, provs []sitestore.Provider) {
	set := &l.set
	halfLife := ms(set.CeilingHalfLifeMs)
	seen := make(map[string]bool, len(provs))
	for i := range provs {
		p := &provs[i]
		seen[p.Name] = true
		pl := sl.providers[p.Name]
		if pl == nil {
			pl = &provLearn{}
			pl.reset()
			sl.providers[p.Name] = pl
		}
		gen, ok := p.GenerationValue()
		switch {
		case !ok:
			// No generation row: learning disabled (G-06).
			if pl.learning {
				pl.reset()
			}
			pl.learning = false
			continue
		case !pl.learning || pl.gen != gen || !pl.genSince.Equal(p.GenerationSince):
			// A new provider revision restarts learning (G-12).
			pl.reset()
			pl.learning, pl.gen, pl.genSince = true, gen, p.GenerationSince
		}
		if p.Stamp.IsZero() || !p.Stamp.After(pl.lastStamp) {
			continue
		}
		pl.lastStamp = p.Stamp
		pl.decay(p.Stamp, set.CeilingFloor, halfLife)
		ld := providerLoad(p)
		if ld.ready <= 0 {
			continue // no serving unit: nothing to learn
		}
		if ld.waiting() {
			// A demonstrated limit (G-11).
			if math.IsNaN(pl.hard) || ld.inFlight < pl.hard {
				pl.hard = ld.inFlight
			}
		} else if math.IsNaN(pl.soft) || ld.inFlight > pl.soft {
			// Nothing waiting (G-10).
			pl.soft = ld.inFlight
		}
	}
	for name := range sl.providers {
		if !seen[name] {
			delete(sl.providers, name)
		}
	}
}

// applyExploreFloor lifts every measured site's weight to at least
// explore_floor × the largest ceiling (G-17).
func applyExploreFloor(sites []sitestate.Site, floor float64) {
	top := 0.0
	for i := range sites {
		if sites[i].CapacityKnown && sites[i].PublishesLoad && sites[i].Capacity > top {
			top = sites[i].Capacity
		}
	}
	lift := floor * top
	for i := range sites {
		s := &sites[i]
		if s.CapacityKnown && s.PublishesLoad && s.Capacity < lift {
			s.Capacity = lift
		}
	}
}
