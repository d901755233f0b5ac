package sitestage

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// randomSnapshot builds a snapshot of n sites with random states.
func randomSnapshot(r *rand.Rand, n int) *sitestate.Snapshot {
	sites := make([]sitestate.Site, n)
	local := r.IntN(n + 1) // n: no local site
	for i := range sites {
		s := &sites[i]
		s.Name = "s" + strconv.Itoa(100+i)
		s.Cluster = "c" + strconv.Itoa(i%3)
		s.Local = i == local
		if !s.Local && r.IntN(8) != 0 {
			s.Gateway = "127.0.0." + strconv.Itoa(2+i) + ":80"
		}
		if r.IntN(5) == 0 {
			s.Models = []string{"m", "other"}[:1+r.IntN(2)]
			if r.IntN(2) == 0 {
				s.Models = []string{"other"}
			}
		}
		s.Ready = r.IntN(6) != 0
		s.Demoted = r.IntN(5) == 0
		s.Telemetry = r.IntN(6) != 0
		s.PublishesLoad = s.Telemetry && r.IntN(5) != 0
		s.Silent = r.IntN(4) == 0
		s.Room = r.IntN(2) == 0
		s.Queued = r.IntN(2) == 0
		s.Full = !s.Room && r.IntN(2) == 0
		s.Rho = r.Float64() * 1.5
		s.RhoFresh = r.IntN(4) != 0
		s.CapacityKnown = r.IntN(3) != 0
		if s.CapacityKnown {
			s.Capacity = 1 + r.Float64()*100
		}
		s.QueueDepth = float64(r.IntN(3))
	}
	sn := &sitestate.Snapshot{Sites: sites, AnyModel: true}
	if r.IntN(10) == 0 {
		sn.Shed = []string{"m"}
	}
	return sn
}

// checkDecision checks the request step's invariants for model "m".
func checkDecision(t *testing.T, sn *sitestate.Snapshot, d Decision) {
	t.Helper()
	var cands []*sitestate.Site
	live := false
	for i := range sn.Sites {
		s := &sn.Sites[i]
		if s.Ready && (s.Local || s.Gateway != "") && s.Serves("m") {
			cands = append(cands, s)
			live = live || !s.Silent
		}
	}
	if sn.Shedding("m") {
		if d.Refusal == nil || d.Refusal.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("shed model not refused: %+v", d)
		}
		return
	}
	if len(cands) == 0 {
		if d.Refusal == nil || d.Refusal.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("no candidate, want 503: %+v", d)
		}
		return
	}
	if d.Refusal != nil {
		t.Fatalf("refused with %d candidates: %+v", len(cands), d.Refusal)
	}
	var pick *sitestate.Site
	for _, c := range cands {
		if c.Name == d.Site {
			pick = c
		}
	}
	if pick == nil {
		t.Fatalf("picked %q, not a candidate", d.Site)
	}
	if pick.Cluster != d.Cluster || pick.Local != d.Local || (!d.Local && d.Gateway != pick.Gateway) || (d.Local && d.Gateway != "") {
		t.Fatalf("decision does not match the site: %+v %+v", d, pick)
	}
	if live && pick.Silent {
		t.Fatalf("silent site picked while a live one exists")
	}
	// The best tier among the remaining (silence-filtered) candidates.
	best := TierLastResort
	for _, c := range cands {
		if live && c.Silent || c.Demoted {
			continue
		}
		tier := TierFallback
		switch {
		case c.Telemetry && c.Room && !c.Queued:
			tier = Tier1
		case c.Telemetry && c.Room:
			tier = Tier2
		case c.Telemetry && c.PublishesLoad && !c.Full:
			tier = Tier3
		case c.Telemetry && c.PublishesLoad:
			tier = Tier4
		}
		best = min(best, tier)
	}
	if d.Tier != best {
		t.Fatalf("tier %s, want %s", d.Tier, best)
	}
	if best != TierLastResort && pick.Demoted {
		t.Fatalf("demoted site picked from %s", best)
	}
	switch d.Tier {
	case Tier1:
		ok(t, pick.Telemetry && pick.Room && !pick.Queued, "T1 pick")
	case Tier2:
		ok(t, pick.Telemetry && pick.Room, "T2 pick")
	case Tier3:
		ok(t, pick.Telemetry && pick.PublishesLoad && !pick.Full, "T3 pick: measured, not full")
	case Tier4:
		ok(t, pick.Telemetry && pick.PublishesLoad, "T4 pick: measured")
	}
	if (d.Reason == ReasonFallback) != (d.Tier == TierFallback || (!live && d.Tier != TierLastResort)) {
		t.Fatalf("reason %s for tier %s (live %v)", d.Reason, d.Tier, live)
	}
	known := false
	for _, p := range Paths {
		known = known || p == d.Path
	}
	ok(t, known, "path in the closed set")
}

func ok(t *testing.T, cond bool, what string) {
	t.Helper()
	if !cond {
		t.Fatal(what)
	}
}

// TestDecideProperties checks the invariants over 3000 seeded random
// snapshots of 1 … 64 sites, several turns each.
func TestDecideProperties(t *testing.T) {
	s := newTestStage(t, 99, nil)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		sn := randomSnapshot(r, 1+r.IntN(sitestate.MaxSites))
		for turn := uint64(0); turn < 5; turn++ {
			checkDecision(t, sn, s.decide(sn, "m", &blockKeys{}, uint64(i)*7+turn))
		}
	}
}

func FuzzDecide(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(3))
	f.Add(uint64(7), uint64(0), uint8(64))
	f.Add(uint64(0), uint64(99), uint8(1))
	s := newTestStage(f, 5, nil)
	f.Fuzz(func(t *testing.T, a, b uint64, n uint8) {
		r := rand.New(rand.NewPCG(a, b))
		sn := randomSnapshot(r, 1+int(n)%sitestate.MaxSites)
		checkDecision(t, sn, s.decide(sn, "m", &blockKeys{}, a^b))
	})
}
