package sitestate

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// MaxSites is the most site candidates one Snapshot holds and one
// request draws among (G-37: the public code's fixed cap); the learner
// keeps the first MaxSites by name and logs once when it cuts.
const MaxSites = 64

// Site is one (site, cluster) candidate as the control step judged it.
// Every field is read-only.
type Site struct {
	// Name and Cluster are the candidate's, from the topology.
	Name, Cluster string
	// Local is true for the EPP's own site: a request that gets it is
	// scheduled on the local pool.
	Local bool
	// Gateway is the remote site's gateway address (host:port, a literal
	// IP as the gateway dials it); "" for the local site.
	Gateway string
	// Models are the models the site serves, sorted; empty: every model.
	Models []string

	// Ready is false when the latest ready-endpoint count is 0 (G-20; the
	// verdict survives silence and clears on a newer sample without a
	// readiness row), or when the site is not admitted: a remote site
	// without a gateway address cannot be routed to.
	Ready bool
	// Demoted is true when the gateway's health checks of the site fail
	// (G-21, G-56): used only as a last resort. The local site is never
	// demoted by probes.
	Demoted bool
	// Telemetry is false for a site that has never sent a load row (G-23):
	// a fallback, below T4.
	Telemetry bool
	// PublishesLoad is G-47's flag: false makes the site unmeasured (no
	// overflow, never holds off shedding, G-48).
	PublishesLoad bool
	// Silent is G-40 … G-46's judgement (a site that published, then sent
	// nothing for the freshness window by its judgement clock, and has
	// not yet returned with two samples).
	Silent bool

	// Room is G-15: the latest retained rho is below 1 (§2.11 #16).
	Room bool
	// Queued is true when work waits at the site (≥ 1 whole request
	// queued, at the deepest endpoint, or held by flow control, G-11):
	// T2 rather than T1.
	Queued bool
	// Full is G-16: at its ceiling with work waiting for full_after_ms.
	Full bool
	// Rho is the smoothed combined pressure (G-14); RhoFresh is true when
	// it rests on a sample inside the freshness window (G-30, G-35).
	Rho      float64
	RhoFresh bool
	// Capacity is the ceiling used as draw weight (G-17, explore_floor
	// applied); 0 with CapacityKnown false when no ceiling is learned
	// (G-34: the draw gives it the mean of the known ones).
	Capacity      float64
	CapacityKnown bool
	// QueueDepth is the windowed worst queue reading, rounded as the
	// store rounds it, for the least-queue tie (G-36).
	QueueDepth float64

	// What the gauges and /debug/sites show (NaN when there is no
	// reading): the bounds and the parts of rho.
	CeilingSoft, CeilingHard, Ceiling float64
	RhoCounted, RhoReported           float64
	InFlight                          float64
}

// Serves reports whether the site serves model (an empty Models list
// serves every model).
func (s *Site) Serves(model string) bool {
	if len(s.Models) == 0 {
		return true
	}
	_, ok := slices.BinarySearch(s.Models, model)
	return ok
}

// Snapshot is every site candidate's state at one control step, and the
// models shed at that step (G-61, G-62). Immutable.
type Snapshot struct {
	// Version increases with every published snapshot.
	Version uint64
	// At is when the control step ran (the EPP's clock).
	At time.Time
	// Sites are sorted by name; at most MaxSites.
	Sites []Site
	// Shed are the models being shed (sorted); only with shedding on.
	Shed []string
	// Known are the models some site of the topology serves by name
	// (sorted); AnyModel is true when a site serves every model (empty
	// Models), so that no model is unknown (G-64's 404).
	Known    []string
	AnyModel bool
	// ShedOthers is true when the models no site names (those only the
	// sites serving every model serve, AnyModel) are shed: every such
	// site is full. Shedding reads it.
	ShedOthers bool
}

// Shedding reports whether model is shed: listed in Shed, or a model no
// site names while ShedOthers is set.
func (sn *Snapshot) Shedding(model string) bool {
	if _, ok := slices.BinarySearch(sn.Shed, model); ok {
		return true
	}
	if !sn.ShedOthers {
		return false
	}
	_, named := slices.BinarySearch(sn.Known, model)
	return !named
}

// ServesModel reports whether any site serves model.
func (sn *Snapshot) ServesModel(model string) bool {
	if sn.AnyModel {
		return true
	}
	_, ok := slices.BinarySearch(sn.Known, model)
	return ok
}

// Local returns the local site, if the snapshot has it.
func (sn *Snapshot) Local() (*Site, bool) {
	for i := range sn.Sites {
		if sn.Sites[i].Local {
			return &sn.Sites[i], true
		}
	}
	return nil, false
}

// Holder publishes Snapshots by atomic swap. The zero value holds none
// (Load returns nil). Safe for concurrent use.
type Holder struct{ p atomic.Pointer[Snapshot] }

// Load returns the latest Snapshot, or nil before the first Store.
func (h *Holder) Load() *Snapshot { return h.p.Load() }

// Store publishes s (which must not change afterwards).
func (h *Holder) Store(s *Snapshot) { h.p.Store(s) }

// NoReading is the value of a gauge with no reading (NaN, §2.9).
func NoReading() float64 { return math.NaN() }
