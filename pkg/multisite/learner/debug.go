package learner

import (
	"math"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// Debug is the control step's view for /debug/sites: what the last
// snapshot says about every site and the models shed. The JSON names are
// stable (the demo's table reads them); a null number has no reading.
type Debug struct {
	// Version and At identify the snapshot (the EPP's clock).
	Version uint64    `json:"version"`
	At      time.Time `json:"at"`
	// Shedding is the availability.shedding switch.
	Shedding bool `json:"shedding"`
	// Shed are the models being shed; ShedOthers the models no site
	// names ("*").
	Shed       []string `json:"shed"`
	ShedOthers bool     `json:"shedOthers"`
	// FreshnessWindow is the window silence and freshness are judged on.
	FreshnessWindow string `json:"freshnessWindow"`
	// Sites are the judged sites, by name.
	Sites []DebugSite `json:"sites"`
}

// DebugSite is one judged site. Names follow sitestate.Site.
type DebugSite struct {
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
	Local   bool   `json:"local"`
	// Ceiling: the bounds and the ceiling (null: none learned).
	CeilingSoft *float64 `json:"ceilingSoft"`
	CeilingHard *float64 `json:"ceilingHard"`
	Ceiling     *float64 `json:"ceiling"`
	// Rho: its parts, the smoothed value and whether it is fresh.
	RhoCounted  *float64 `json:"rhoCounted"`
	RhoReported *float64 `json:"rhoReported"`
	Rho         *float64 `json:"rho"`
	RhoFresh    bool     `json:"rhoFresh"`
	InFlight    *float64 `json:"inFlight"`
	QueueDepth  float64  `json:"queueDepth"`
	// The tier inputs.
	Ready         bool `json:"ready"`
	Room          bool `json:"room"`
	Queued        bool `json:"queued"`
	Full          bool `json:"full"`
	Silent        bool `json:"silent"`
	PublishesLoad bool `json:"publishesLoad"`
	Telemetry     bool `json:"telemetry"`
	Demoted       bool `json:"demoted"`
	// Weight is the draw weight (null: unknown capacity).
	Weight *float64 `json:"weight"`
	// Tier is the site's own class, for tables, by the site stage's rule:
	// "T1" (room, no queue), "T2" (room, queued), "T3" (measured, not
	// full), "T4" (measured, full), or, outside the tiers, "unready",
	// "silent" or "fallback" (no telemetry, or unmeasured without room:
	// G-23, G-48). The site stage forms the tiers per request among the
	// sites serving the model; a demoted site (Demoted) is a last resort
	// whatever its tier.
	Tier string `json:"tier"`
}

// TierOf is DebugSite.Tier.
func TierOf(s *sitestate.Site) string {
	switch {
	case !s.Ready:
		return "unready"
	case s.Silent:
		return "silent"
	case !s.Telemetry:
		return "fallback"
	case s.Room && !s.Queued:
		return "T1"
	case s.Room:
		return "T2"
	case !s.PublishesLoad:
		// Unmeasured sites are only in T1/T2 (G-48).
		return "fallback"
	case !s.Full:
		return "T3"
	default:
		return "T4"
	}
}

// DebugOf reports a snapshot (nil before the first step: nil).
func DebugOf(sn *sitestate.Snapshot, set Settings) *Debug {
	if sn == nil {
		return nil
	}
	num := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	d := &Debug{Version: sn.Version, At: sn.At, Shedding: set.Shedding, Shed: append([]string{}, sn.Shed...), ShedOthers: sn.ShedOthers,
		FreshnessWindow: set.FreshnessWindow().String(), Sites: make([]DebugSite, 0, len(sn.Sites))}
	for i := range sn.Sites {
		s := &sn.Sites[i]
		ds := DebugSite{
			Name: s.Name, Cluster: s.Cluster, Local: s.Local,
			CeilingSoft: num(s.CeilingSoft), CeilingHard: num(s.CeilingHard), Ceiling: num(s.Ceiling),
			RhoCounted: num(s.RhoCounted), RhoReported: num(s.RhoReported), Rho: num(s.Rho), RhoFresh: s.RhoFresh,
			InFlight: num(s.InFlight), QueueDepth: s.QueueDepth,
			Ready: s.Ready, Room: s.Room, Queued: s.Queued, Full: s.Full, Silent: s.Silent,
			PublishesLoad: s.PublishesLoad, Telemetry: s.Telemetry, Demoted: s.Demoted,
		}
		if s.CapacityKnown {
			ds.Weight = num(s.Capacity)
		}
		ds.Tier = TierOf(s)
		d.Sites = append(d.Sites, ds)
	}
	return d
}
