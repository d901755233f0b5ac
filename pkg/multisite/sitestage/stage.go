package sitestage

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Paths of grid_route_selections_total{path}: the arm of the draw a
// request took (G-31 … G-36, §2.11 #13). A closed set.
const (
	PathLone       = "lone"        // one site left in the tier (G-33)
	PathBetweenTwo = "between_two" // two sites, shares capacity/(1+rho) clamped to 10 … 90 % (G-32)
	PathTwoChoices = "two_choices" // three or more: two distinct capacity draws, lower rho wins (G-31)
	PathByCapacity = "by_capacity" // a capacity-weighted draw (G-35, T3/T4 with equal queues)
	PathQueueTie   = "queue_tie"   // the least-queue tie removed sites, then a capacity draw (G-36)
	PathFallback   = "fallback"    // below T4: the fallback set (capacity draw) or the last resort (front candidate)
)

// Paths is the closed set of path labels, in a fixed order.
var Paths = []string{PathLone, PathBetweenTwo, PathTwoChoices, PathByCapacity, PathQueueTie, PathFallback}

// Reasons of grid_route_decisions_total{site,reason}: why a request went
// where it went, or why it was refused (site ""). A closed set.
const (
	ReasonRoom       = "room"        // T1: a queue-free site with room
	ReasonQueued     = "queued"      // T2: a queued site with room
	ReasonNotFull    = "not_full"    // T3: overflow to a measured site not marked full
	ReasonHealthy    = "healthy"     // T4: overflow to any measured, healthy site
	ReasonFallback   = "fallback"    // no tier had a site (no telemetry, unmeasured: G-23, G-51, §2.11 #15), every site silent (G-45), or no snapshot yet
	ReasonLastResort = "last_resort" // only health-demoted sites were left (G-21, G-57)
	ReasonInbound    = "inbound"     // the request came from another site's EPP: local pods only, never forwarded again
	ReasonSubsetHint = "subset_hint" // the gateway's subset hint pins the request to local endpoints

	ReasonShed          = "shed"            // 429: the model is shed (G-63)
	ReasonNoRoute       = "no_route"        // 503: no healthy routable site serves the model (G-64)
	ReasonModelNotFound = "model_not_found" // 404: no site serves the model (G-64)
	ReasonNoModel       = "no_model"        // 400: the request names no model and not every site serves every model
)

// Reasons is the closed set of reason labels; RefusalReasons those
// counted with site "".
var (
	Reasons        = []string{ReasonRoom, ReasonQueued, ReasonNotFull, ReasonHealthy, ReasonFallback, ReasonLastResort, ReasonInbound, ReasonSubsetHint, ReasonShed, ReasonNoRoute, ReasonModelNotFound, ReasonNoModel}
	RefusalReasons = []string{ReasonShed, ReasonNoRoute, ReasonModelNotFound, ReasonNoModel}
)

// OpenAI error types of the refusals' bodies (the body's code is the
// reason).
const (
	ErrorTypeRateLimit     = "rate_limit_exceeded"
	ErrorCodeCapacity      = "capacity_exhausted"
	ErrorCodeNoHealthySite = "no_healthy_site"
	ErrorTypeServer        = "server_error"
	ErrorTypeInvalid       = "invalid_request_error"
	RetryAfterMin          = 3 * time.Second // G-63: Retry-After is 3 … 7 s, spread by the request counter
	RetryAfterSpreadSteps  = 5
)

// Tier is where a pick came from (G-22, G-23).
type Tier uint8

// The tiers, best first.
const (
	TierNone       Tier = iota // no draw: refused, inbound, subset hint or no snapshot
	Tier1                      // queue-free sites with room
	Tier2                      // queued sites with room
	Tier3                      // measured sites not marked full
	Tier4                      // every measured healthy site
	TierFallback               // sites without telemetry, or unmeasured
	TierLastResort             // health-demoted sites
)

var tierNames = [...]string{"none", "t1", "t2", "t3", "t4", "fallback", "last_resort"}

func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return "tier(" + strconv.Itoa(int(t)) + ")"
}

// Decision is the site stage's answer for one request.
type Decision struct {
	// Refusal, when not nil, is the answer to send (404, 429, 503, 400);
	// the other fields are then empty.
	Refusal *scheduling.Refusal
	// Site and Cluster name the chosen site (x-grid-site, x-grid-backend).
	Site, Cluster string
	// Local is true when the request is scheduled on the local pool.
	Local bool
	// Gateway is the remote site's gateway (host:port) the request is sent
	// to; "" when Local.
	Gateway string
	// Tier, Path and Reason say how the site was chosen (Path "" when no
	// draw ran).
	Tier   Tier
	Path   string
	Reason string

	// idx is 1 + the chosen site's index in the snapshot (0: none), for
	// the counters' per-snapshot cache.
	idx int16
}

// Options configures a Stage.
type Options struct {
	// Holder is where the learner publishes Snapshots; required.
	Holder *sitestate.Holder
	// LocalSite and LocalCluster name this EPP's site (--site-name,
	// --site-cluster): the answer before the first Snapshot, and for
	// requests kept local (inbound, subset hint).
	LocalSite, LocalCluster string
	// Seed salts the draws (G-37); 0 draws a random salt at start, so that
	// replicas do not draw in lock-step. Tests set it.
	Seed uint64
	// Affinity configures the site-level prefix affinity (G-24).
	Affinity AffinityOptions
	// Registerer receives the grid_route_selections_total and
	// grid_route_decisions_total counters; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger logs at V(4) one line per decision.
	Logger logr.Logger
}

// Stage is the request step of seed 000 (§2.12). Safe for concurrent
// use; Decide does no I/O and takes no lock.
type Stage struct {
	holder       *sitestate.Holder
	localSite    string
	localCluster string
	salt         uint64
	turn         atomic.Uint64
	aff          *affinity
	log          logr.Logger

	selections [6]prometheus.Counter
	decisions  *prometheus.CounterVec
	refusals   [4]prometheus.Counter // site "", RefusalReasons
	// local are the decision counters of LocalSite by Reasons, for
	// decisions without a snapshot index (no snapshot yet), each resolved
	// once on first use (so no zero series appears before).
	local []atomic.Pointer[counterRef]
	// counters caches the decision counters of the latest snapshot's
	// sites, so the request path takes no lock of the CounterVec.
	counters atomic.Pointer[siteCounters]
}

// siteCounters are the decision counters of one snapshot's sites, filled
// as decisions are made: slot i*len(Reasons)+r for site i, reason r.
type siteCounters struct {
	sites *sitestate.Site // &Sites[0] of the snapshot
	n     int
	c     []atomic.Pointer[counterRef]
}

type counterRef struct{ prometheus.Counter }

// New returns a Stage.
func New(opts Options) (*Stage, error) {
	if opts.Holder == nil {
		return nil, errors.New("sitestage: Holder is required")
	}
	if opts.LocalSite == "" {
		return nil, errors.New("sitestage: LocalSite is required")
	}
	aff, err := newAffinity(opts.Affinity)
	if err != nil {
		return nil, err
	}
	s := &Stage{holder: opts.Holder, localSite: opts.LocalSite, localCluster: opts.LocalCluster, salt: opts.Seed, aff: aff, log: opts.Logger}
	if s.salt == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		s.salt = binary.LittleEndian.Uint64(b[:]) | 1
	}
	sel := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grid_route_selections_total",
		Help: "Requests by the arm of the site draw they took (lone, between_two, two_choices, by_capacity, queue_tie, fallback).",
	}, []string{"path"})
	for i, p := range Paths {
		s.selections[i] = sel.WithLabelValues(p)
	}
	s.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grid_route_decisions_total",
		Help: "Site decisions by site and reason; refusals (shed, no_route, model_not_found, no_model) have site \"\".",
	}, []string{"site", "reason"})
	for i, r := range RefusalReasons {
		s.refusals[i] = s.decisions.WithLabelValues("", r)
	}
	s.local = make([]atomic.Pointer[counterRef], len(Reasons))
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(sel); err != nil {
			return nil, err
		}
		if err := opts.Registerer.Register(s.decisions); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// LocalSite returns the names of this EPP's site.
func (s *Stage) LocalSite() (site, cluster string) { return s.localSite, s.localCluster }

// Decide chooses the site of a request for model (the model the request
// is sent to) with prompt (the bytes the prefix affinity hashes; nil for
// none), and counts the decision. One atomic load of the Snapshot, one
// atomic add of the request counter.
func (s *Stage) Decide(model string, prompt []byte) Decision {
	turn := s.turn.Add(1)
	sn := s.holder.Load()
	var keys blockKeys
	keys.compute(s.aff, prompt)
	d := s.decide(sn, model, &keys, turn)
	s.count(sn, &d)
	if d.Refusal == nil && s.aff != nil && keys.n > 0 {
		key := siteKey(d.Site, d.Cluster)
		if d.idx > 0 {
			key = s.aff.siteKeys(sn.Sites)[d.idx-1]
		}
		s.aff.record(&keys, key)
	}
	if s.log.V(4).Enabled() {
		s.log.V(4).Info("Site chosen", "model", model, "site", d.Site, "tier", d.Tier.String(), "path", d.Path, "reason", d.Reason)
	}
	return d
}

// KeepLocal is the decision for a request for model that stays on the
// local pool without a draw: reason ReasonInbound (it came from another
// site) or ReasonSubsetHint. The model checks still apply (400, 404, and
// the 429 of a shed model), so a request that claims to come from
// another site cannot escape shedding. It is counted.
func (s *Stage) KeepLocal(model, reason string) Decision {
	turn := s.turn.Add(1)
	d := Decision{Site: s.localSite, Cluster: s.localCluster, Local: true, Reason: reason}
	sn := s.holder.Load()
	if sn != nil {
		if r, refused := modelChecks(sn, model, turn); refused {
			d = r
		} else {
			for i := range sn.Sites {
				if i < sitestate.MaxSites && sn.Sites[i].Local {
					d.Site, d.Cluster, d.idx = sn.Sites[i].Name, sn.Sites[i].Cluster, int16(i)+1
					break
				}
			}
		}
	}
	s.count(sn, &d)
	return d
}

// RemoteSite reports whether name is a remote site of the latest
// snapshot (so not this EPP's own site, nor a name the topology does not
// have). extproc trusts the origin header of an inbound request only
// when it names one. One atomic load and at most MaxSites comparisons.
func (s *Stage) RemoteSite(name string) bool {
	sn := s.holder.Load()
	if sn == nil || name == "" {
		return false
	}
	for i := range sn.Sites {
		if sn.Sites[i].Name == name {
			return !sn.Sites[i].Local
		}
	}
	return false
}

// modelChecks is step 1 of the request step: no model (400), a model no
// site serves (404), a shed model (429).
func modelChecks(sn *sitestate.Snapshot, model string, turn uint64) (Decision, bool) {
	if model == "" && !sn.AnyModel {
		return refusal(http.StatusBadRequest, ReasonNoModel, ErrorTypeInvalid, "the request names no model, and not every site serves every model", 0), true
	}
	if !sn.ServesModel(model) {
		return refusal(http.StatusNotFound, ReasonModelNotFound, ErrorTypeInvalid, "the model "+strconv.Quote(model)+" is served by no site", 0), true
	}
	if sn.Shedding(model) {
		r := refusal(http.StatusTooManyRequests, ReasonShed, ErrorTypeRateLimit, "every site serving the model is at its capacity; retry later", retryAfter(turn))
		r.Refusal.Reason = ErrorCodeCapacity
		return r, true
	}
	return Decision{}, false
}

func (s *Stage) count(sn *sitestate.Snapshot, d *Decision) {
	if d.Path != "" {
		for i, p := range Paths {
			if p == d.Path {
				s.selections[i].Inc()
				break
			}
		}
	}
	if d.Refusal != nil {
		for i, r := range RefusalReasons {
			if r == d.Reason {
				s.refusals[i].Inc()
				return
			}
		}
	}
	if d.idx > 0 && sn != nil {
		if c := s.siteCounter(sn, int(d.idx-1), d); c != nil {
			c.Inc()
			return
		}
	}
	if d.Site == s.localSite {
		for i, r := range Reasons {
			if r == d.Reason {
				ref := s.local[i].Load()
				if ref == nil {
					ref = &counterRef{s.decisions.WithLabelValues(s.localSite, r)}
					s.local[i].Store(ref)
				}
				ref.Inc()
				return
			}
		}
	}
	s.decisions.WithLabelValues(d.Site, d.Reason).Inc() // not reached by the stage's own decisions
}

// siteCounter returns the cached decision counter of site i of sn for
// d.Reason, resolving it once per snapshot.
func (s *Stage) siteCounter(sn *sitestate.Snapshot, i int, d *Decision) prometheus.Counter {
	r := -1
	for k, reason := range Reasons {
		if reason == d.Reason {
			r = k
			break
		}
	}
	if r < 0 || i >= len(sn.Sites) {
		return nil
	}
	c := s.counters.Load()
	if c == nil || c.n != len(sn.Sites) || c.sites != &sn.Sites[0] {
		c = &siteCounters{sites: &sn.Sites[0], n: len(sn.Sites), c: make([]atomic.Pointer[counterRef], len(sn.Sites)*len(Reasons))}
		s.counters.Store(c)
	}
	slot := &c.c[i*len(Reasons)+r]
	if ref := slot.Load(); ref != nil {
		return ref.Counter
	}
	ref := &counterRef{s.decisions.WithLabelValues(d.Site, d.Reason)}
	slot.Store(ref)
	return ref.Counter
}

// retryAfter spreads Retry-After over 3 … 7 s by the request counter.
func retryAfter(turn uint64) time.Duration {
	return RetryAfterMin + time.Duration(turn%RetryAfterSpreadSteps)*time.Second
}

// set is a fixed-size list of indexes into Snapshot.Sites.
type set struct {
	n   int
	idx [sitestate.MaxSites]uint8
}

func (c *set) add(i int) {
	if c.n < len(c.idx) {
		c.idx[c.n] = uint8(i)
		c.n++
	}
}

// decide is the request step, a pure function of (snapshot, model, the
// affinity record, turn, salt).
func (s *Stage) decide(sn *sitestate.Snapshot, model string, keys *blockKeys, turn uint64) Decision {
	if sn == nil {
		return Decision{Site: s.localSite, Cluster: s.localCluster, Local: true, Tier: TierFallback, Path: PathFallback, Reason: ReasonFallback}
	}
	// 1. Unknown model: 404; no model: 400; shed: 429.
	if r, refused := modelChecks(sn, model, turn); refused {
		return r
	}
	sites := sn.Sites
	if len(sites) > sitestate.MaxSites {
		sites = sites[:sitestate.MaxSites]
	}
	// 2. Admitted, routable, ready candidates serving the model (G-20).
	var cand set
	live := 0
	for i := range sites {
		st := &sites[i]
		if !st.Ready || !(st.Local || st.Gateway != "") || !st.Serves(model) {
			continue
		}
		cand.add(i)
		if !st.Silent {
			live++
		}
	}
	if cand.n == 0 {
		return noRoute(model, turn)
	}
	// 3. Silent sites are dropped while a live one serves the model
	// (G-43); when all are silent they all stay and the pick is a
	// fallback (G-45).
	allSilent := live == 0
	// 4.–6. The tiers; unmeasured sites only in T1/T2 (G-48), demoted ones
	// only as the last resort (G-21), no telemetry below T4 (G-23).
	var tiers [4]set
	var fallback, demoted set
	for k := 0; k < cand.n; k++ {
		i := int(cand.idx[k])
		st := &sites[i]
		if st.Silent && !allSilent {
			continue
		}
		if st.Demoted {
			demoted.add(i)
			continue
		}
		placed := false
		if st.Telemetry {
			if st.Room {
				if st.Queued {
					tiers[1].add(i)
				} else {
					tiers[0].add(i)
				}
				placed = true
			}
			if st.PublishesLoad {
				if !st.Full {
					tiers[2].add(i)
				}
				tiers[3].add(i)
				placed = true
			}
		}
		if !placed {
			fallback.add(i)
		}
	}
	var chosen *set
	tier := TierNone
	for t := range tiers {
		if tiers[t].n > 0 {
			chosen, tier = &tiers[t], Tier1+Tier(t)
			break
		}
	}
	if chosen == nil {
		switch {
		case fallback.n > 0:
			chosen, tier = &fallback, TierFallback
		case demoted.n > 0:
			chosen, tier = &demoted, TierLastResort
		default:
			return noRoute(model, turn)
		}
	}
	// 7. Affinity: the tier's site the prefix was last sent to, if any
	// (G-24); the draw only uses it to choose between the two sites it
	// drew.
	pref := -1
	if s.aff != nil && tier != TierLastResort { // G-57: the front candidate, whatever the prefix
		pref = s.aff.preferred(sites, chosen, keys)
	}
	// 8. The draw.
	r1 := mix(turn, s.salt)
	r2 := mix(r1, s.salt^0x9e3779b97f4a7c15)
	pick, path := draw(sites, chosen, tier, r1, r2, pref)
	st := &sites[pick]
	d := Decision{Site: st.Name, Cluster: st.Cluster, Local: st.Local, Tier: tier, Path: path, idx: int16(pick) + 1}
	if !st.Local {
		d.Gateway = st.Gateway
	}
	switch {
	case tier == TierLastResort:
		d.Reason = ReasonLastResort
	case allSilent || tier == TierFallback:
		d.Reason = ReasonFallback
	default:
		d.Reason = [...]string{ReasonRoom, ReasonQueued, ReasonNotFull, ReasonHealthy}[tier-Tier1]
	}
	return d
}

// noRoute is the 503 of a model no healthy routable site serves (G-64),
// with the body code no_healthy_site and a Retry-After.
func noRoute(model string, turn uint64) Decision {
	r := refusal(http.StatusServiceUnavailable, ReasonNoRoute, ErrorTypeServer, "no healthy routable site serves the model "+strconv.Quote(model), retryAfter(turn))
	r.Refusal.Reason = ErrorCodeNoHealthySite
	return r
}

func refusal(status int, reason, errType, msg string, retry time.Duration) Decision {
	return Decision{Reason: reason, Refusal: &scheduling.Refusal{StatusCode: status, Reason: reason, Message: msg, RetryAfter: retry, ErrorType: errType}}
}

// draw picks one site of c (G-30 … G-36) with the random words r1, r2.
// pref is the affinity's site (an index into sites, -1 for none): it wins
// when it is one of the two sites a draw takes, never otherwise (G-24).
func draw(sites []sitestate.Site, c *set, tier Tier, r1, r2 uint64, pref int) (int, string) {
	switch tier {
	case TierLastResort:
		// G-57: the front candidate (the first by name).
		return int(c.idx[0]), PathFallback
	case TierFallback:
		return byCapacity(sites, c, r1, r2, pref), PathFallback
	}
	if c.n == 1 {
		return int(c.idx[0]), PathLone
	}
	if tier == Tier1 || tier == Tier2 {
		fresh := true
		for k := 0; k < c.n; k++ {
			if !sites[c.idx[k]].RhoFresh {
				fresh = false
				break
			}
		}
		if fresh {
			if c.n == 2 {
				return betweenTwo(sites, c, r1, r2, pref), PathBetweenTwo
			}
			return twoChoices(sites, c, r1, r2, pref), PathTwoChoices
		}
	}
	// Queue-only (no fresh rho) and saturated selection: the least-queue
	// tie, then capacity (G-35, G-36).
	path := PathByCapacity
	if queueTie(sites, c) {
		path = PathQueueTie
	}
	if c.n == 1 {
		return int(c.idx[0]), path
	}
	return byCapacity(sites, c, r1, r2, pref), path
}

// queueTie keeps the sites tied on the least queue depth; it reports
// whether it removed any. Sites without a queue reading (NaN) are left
// out of the tie unless none has one (§2.11 #9).
func queueTie(sites []sitestate.Site, c *set) bool {
	least := math.Inf(1)
	for k := 0; k < c.n; k++ {
		if q := sites[c.idx[k]].QueueDepth; q < least {
			least = q
		}
	}
	if math.IsInf(least, 1) {
		return false // no readings: all tied
	}
	n := 0
	for k := 0; k < c.n; k++ {
		if sites[c.idx[k]].QueueDepth == least {
			c.idx[n] = c.idx[k]
			n++
		}
	}
	removed := n < c.n
	c.n = n
	return removed
}

// weights fills w with the draw weights of c: the capacity, the mean of
// the known capacities for an unknown one, 1 for all when none is known
// (G-34).
func weights(sites []sitestate.Site, c *set, w *[sitestate.MaxSites]float64) {
	sum, known := 0.0, 0
	for k := 0; k < c.n; k++ {
		st := &sites[c.idx[k]]
		if st.CapacityKnown && st.Capacity > 0 && !math.IsInf(st.Capacity, 0) {
			sum += st.Capacity
			known++
		}
	}
	mean := 1.0
	if known > 0 {
		mean = sum / float64(known)
	}
	for k := 0; k < c.n; k++ {
		st := &sites[c.idx[k]]
		if st.CapacityKnown && st.Capacity > 0 && !math.IsInf(st.Capacity, 0) {
			w[k] = st.Capacity
		} else if known > 0 {
			w[k] = mean
		} else {
			w[k] = 1
		}
	}
}

// pickWeighted returns the position in c drawn with weights w (skipping
// position skip, -1 for none) from the random word r.
func pickWeighted(c *set, w *[sitestate.MaxSites]float64, skip int, r uint64) int {
	total := 0.0
	for k := 0; k < c.n; k++ {
		if k != skip {
			total += w[k]
		}
	}
	x := unit(r) * total
	last := -1
	for k := 0; k < c.n; k++ {
		if k == skip {
			continue
		}
		last = k
		if x < w[k] {
			return k
		}
		x -= w[k]
	}
	return last
}

// byCapacity draws by capacity with r1; when pref is not that site, a
// second distinct draw (r2) that hits pref takes it instead.
func byCapacity(sites []sitestate.Site, c *set, r1, r2 uint64, pref int) int {
	var w [sitestate.MaxSites]float64
	weights(sites, c, &w)
	a := pickWeighted(c, &w, -1, r1)
	ia := int(c.idx[a])
	if pref < 0 || ia == pref || c.n < 2 {
		return ia
	}
	if ib := int(c.idx[pickWeighted(c, &w, a, r2)]); ib == pref {
		return ib
	}
	return ia
}

// twoChoices takes two distinct capacity-weighted draws and keeps the one
// with the lower rho; a tie keeps the first (G-31). When pref is one of
// the two, it is kept (G-24).
func twoChoices(sites []sitestate.Site, c *set, r1, r2 uint64, pref int) int {
	var w [sitestate.MaxSites]float64
	weights(sites, c, &w)
	a := pickWeighted(c, &w, -1, r1)
	b := pickWeighted(c, &w, a, r2)
	ia, ib := int(c.idx[a]), int(c.idx[b])
	if pref >= 0 && (ia == pref || ib == pref) {
		return pref
	}
	if sites[ib].Rho < sites[ia].Rho {
		return ib
	}
	return ia
}

// Share bounds of between_two (G-32).
const (
	MinShare = 0.10
	MaxShare = 0.90
)

// betweenTwo weighs the two sites capacity/(1+rho), clamps the first's
// share to [MinShare, MaxShare] and draws once (G-32). With an affinity
// site pref, a second draw (r2) from the same share that hits pref takes
// it, so pref gets 1-(1-share)² rather than every request (G-24).
func betweenTwo(sites []sitestate.Site, c *set, r, r2 uint64, pref int) int {
	var w [sitestate.MaxSites]float64
	weights(sites, c, &w)
	a, b := &sites[c.idx[0]], &sites[c.idx[1]]
	wa := w[0] / (1 + math.Max(0, a.Rho))
	wb := w[1] / (1 + math.Max(0, b.Rho))
	share := 0.5
	if t := wa + wb; t > 0 && !math.IsNaN(t) && !math.IsInf(t, 0) {
		share = wa / t
	}
	share = math.Min(MaxShare, math.Max(MinShare, share))
	pick := int(c.idx[1])
	if unit(r) < share {
		pick = int(c.idx[0])
	}
	if pref >= 0 && pick != pref {
		second := int(c.idx[1])
		if unit(r2) < share {
			second = int(c.idx[0])
		}
		if second == pref {
			return pref
		}
	}
	return pick
}

// mix is the salted 64-bit hash of the request counter (G-37): the
// splitmix64 finalizer of turn mixed with the salt.
func mix(turn, salt uint64) uint64 {
	z := turn*0x9e3779b97f4a7c15 + salt
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unit maps a random word to [0, 1).
func unit(r uint64) float64 { return float64(r>>11) / (1 << 53) }
