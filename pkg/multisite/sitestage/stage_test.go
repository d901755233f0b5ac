package sitestage

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// room is a measured, ready, queue-free site with fresh rho and room (T1).
func room(name string, capacity, rho float64) sitestate.Site {
	return sitestate.Site{
		Name: name, Cluster: name + "-c", Gateway: "127.0.0.1:1" + strings.Repeat("0", 3),
		Ready: true, Telemetry: true, PublishesLoad: true,
		Room: rho < 1, Rho: rho, RhoFresh: true,
		Capacity: capacity, CapacityKnown: capacity > 0, QueueDepth: 0,
	}
}

// full is a measured site without room, marked full (T4 only).
func full(name string, capacity, queue float64) sitestate.Site {
	s := room(name, capacity, 1.2)
	s.Room, s.Queued, s.Full, s.QueueDepth = false, true, true, queue
	return s
}

// notFull is a measured site without room, not marked full (T3).
func notFull(name string, capacity, queue float64) sitestate.Site {
	s := full(name, capacity, queue)
	s.Full = false
	return s
}

func snap(sites ...sitestate.Site) *sitestate.Snapshot {
	return &sitestate.Snapshot{Version: 1, Sites: sites, AnyModel: true}
}

func newTestStage(t testing.TB, seed uint64, reg prometheus.Registerer) *Stage {
	t.Helper()
	s, err := New(Options{Holder: &sitestate.Holder{}, LocalSite: "a", LocalCluster: "a-c", Seed: seed,
		Affinity: AffinityOptions{Disabled: true}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// counts runs n decisions for model m on sn, turns 1..n, and counts the
// sites and paths picked.
func counts(t *testing.T, s *Stage, sn *sitestate.Snapshot, n int) (sites, paths, reasons map[string]int) {
	t.Helper()
	sites, paths, reasons = map[string]int{}, map[string]int{}, map[string]int{}
	var k blockKeys
	for turn := 1; turn <= n; turn++ {
		d := s.decide(sn, "m", &k, uint64(turn))
		if d.Refusal != nil {
			t.Fatalf("turn %d refused: %+v", turn, d.Refusal)
		}
		sites[d.Site]++
		paths[d.Path]++
		reasons[d.Reason]++
	}
	return sites, paths, reasons
}

// within checks got is inside want ±15 % (of want).
func within(t *testing.T, what string, got int, want float64) {
	t.Helper()
	if math.Abs(float64(got)-want) > 0.15*want {
		t.Errorf("%s: got %d, want %.0f ±15%%", what, got, want)
	}
}

func TestG20_UnreadySitesExcluded(t *testing.T) {
	s := newTestStage(t, 7, nil)
	b := room("b", 100, 0.1)
	b.Ready = false
	sites, _, _ := counts(t, s, snap(room("a", 10, 0.5), b, room("c", 10, 0.5)), 2000)
	if sites["b"] != 0 {
		t.Fatalf("unready site picked %d times", sites["b"])
	}
	a := room("a", 10, 0.5)
	a.Ready = false
	d := s.decide(snap(a, b), "m", &blockKeys{}, 1)
	if d.Refusal == nil || d.Refusal.StatusCode != http.StatusServiceUnavailable || d.Reason != ReasonNoRoute || d.Refusal.RetryAfter < 3*time.Second {
		t.Fatalf("every site unready: want 503 no_route with Retry-After, got %+v %+v", d, d.Refusal)
	}
	// A remote site without a gateway address is not routable either.
	c := room("c", 10, 0.1)
	c.Gateway = ""
	sites, _, _ = counts(t, s, snap(room("a", 10, 0.5), c), 500)
	if sites["c"] != 0 {
		t.Fatal("a remote site without a gateway address was picked")
	}
}

func TestG21_DemotedOnlyAsLastResort(t *testing.T) {
	s := newTestStage(t, 7, nil)
	b := room("b", 1000, 0)
	b.Demoted = true
	// Even a worse, overflowing site beats a demoted one with room.
	sites, _, _ := counts(t, s, snap(full("a", 10, 3), b), 2000)
	if sites["b"] != 0 {
		t.Fatalf("demoted site picked %d times while a healthy one exists", sites["b"])
	}
	a := room("a", 10, 0)
	a.Demoted = true
	sites, paths, reasons := counts(t, s, snap(a, b), 500)
	if sites["a"] != 500 || reasons[ReasonLastResort] != 500 || paths[PathFallback] != 500 {
		t.Fatalf("every site demoted: want the front candidate as last resort, got %v %v %v", sites, paths, reasons)
	}
}

func TestG22_TiersFirstNonEmptyWins(t *testing.T) {
	s := newTestStage(t, 7, nil)
	queued := room("q", 1000, 0.1)
	queued.Queued = true
	cases := []struct {
		name   string
		sn     *sitestate.Snapshot
		want   string
		tier   Tier
		reason string
	}{
		{"T1 beats T2", snap(room("a", 1, 0.9), queued), "a", Tier1, ReasonRoom},
		{"T2 beats T3", snap(notFull("a", 1000, 0), queued), "q", Tier2, ReasonQueued},
		{"T3 beats T4", snap(full("f", 1000, 0), notFull("n", 1, 5)), "n", Tier3, ReasonNotFull},
		{"T4 when all are full", snap(full("f", 10, 2)), "f", Tier4, ReasonHealthy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for turn := uint64(1); turn <= 1000; turn++ {
				d := s.decide(c.sn, "m", &blockKeys{}, turn)
				if d.Site != c.want || d.Tier != c.tier || d.Reason != c.reason {
					t.Fatalf("turn %d: got %s %s %s, want %s %s %s", turn, d.Site, d.Tier, d.Reason, c.want, c.tier, c.reason)
				}
			}
		})
	}
}

func TestG23_NoTelemetryIsAFallbackBeforeDemoted(t *testing.T) {
	s := newTestStage(t, 7, nil)
	none := sitestate.Site{Name: "n", Cluster: "n-c", Gateway: "127.0.0.1:9", Ready: true}
	dem := full("d", 10, 0)
	dem.Demoted = true
	sites, _, _ := counts(t, s, snap(full("a", 10, 4), none, dem), 1000)
	if sites["a"] != 1000 {
		t.Fatalf("a measured T4 site must beat the no-telemetry one: %v", sites)
	}
	sites, paths, reasons := counts(t, s, snap(none, dem), 1000)
	if sites["n"] != 1000 || reasons[ReasonFallback] != 1000 || paths[PathFallback] != 1000 {
		t.Fatalf("no telemetry before demoted, counted as fallback: %v %v %v", sites, paths, reasons)
	}
	// §2.11 #15: no site measured, draw by capacity (evenly) among them.
	none2 := none
	none2.Name = "o"
	sites, _, _ = counts(t, s, snap(none, none2), 2000)
	within(t, "n", sites["n"], 1000)
	within(t, "o", sites["o"], 1000)
}

// TestG24_AffinityNarrowsOnlyWithinTheTier: the affinity's site wins the
// pairs two_choices draws it into (2/3 of them among three equal sites),
// and never pulls a request out of its tier.
func TestG24_AffinityNarrowsOnlyWithinTheTier(t *testing.T) {
	s, err := New(Options{Holder: &sitestate.Holder{}, LocalSite: "a", Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []byte(strings.Repeat("the shared system prompt. ", 80)) // 2080 bytes: 8 blocks
	var k blockKeys
	k.compute(s.aff, prompt)
	if k.n != 8 {
		t.Fatalf("blocks: %d", k.n)
	}
	s.aff.record(&k, siteKey("b", "b-c"))
	t1 := snap(room("a", 10, 0.2), room("b", 10, 0.2), room("c", 10, 0.2))
	seen := map[string]int{}
	for turn := uint64(1); turn <= 3000; turn++ {
		d := s.decide(t1, "m", &k, turn)
		if d.Path != PathTwoChoices {
			t.Fatalf("turn %d: path %s", turn, d.Path)
		}
		seen[d.Site]++
	}
	within(t, "b, the affinity's site", seen["b"], 2000)
	within(t, "a", seen["a"], 500)
	within(t, "c", seen["c"], 500)
	// b is in T2 while a and c are in T1: affinity cannot pull the request
	// down a tier.
	qb := room("b", 10, 0.2)
	qb.Queued = true
	mixed := snap(room("a", 10, 0.2), qb, room("c", 10, 0.2))
	seen = map[string]int{}
	for turn := uint64(1); turn <= 1000; turn++ {
		seen[s.decide(mixed, "m", &k, turn).Site]++
	}
	if seen["b"] != 0 || seen["a"] == 0 || seen["c"] == 0 {
		t.Fatalf("affinity crossed a tier or narrowed to a site outside it: %v", seen)
	}
	// A run below MinRun never narrows.
	short := []byte(strings.Repeat("x", 3*DefaultBlockBytes))
	var ks blockKeys
	ks.compute(s.aff, short)
	s.aff.record(&ks, siteKey("b", "b-c"))
	seen = map[string]int{}
	for turn := uint64(1); turn <= 1000; turn++ {
		seen[s.decide(t1, "m", &ks, turn).Site]++
	}
	for _, n := range []string{"a", "b", "c"} {
		within(t, "3-block run, site "+n, seen[n], 1000.0/3)
	}
	// Between two sites, the affinity's site wins either of two draws of
	// the share: 1-(1/2)² = 3/4 of an equal pair.
	seen = map[string]int{}
	for turn := uint64(1); turn <= 4000; turn++ {
		seen[s.decide(snap(room("a", 10, 0.2), room("b", 10, 0.2)), "m", &k, turn).Site]++
	}
	within(t, "between_two, b", seen["b"], 3000)
}

func TestG30_PressureDrawWhenAllRhoFreshEvenWithUnknownCapacity(t *testing.T) {
	s := newTestStage(t, 7, nil)
	a, b, c := room("a", 0, 0.1), room("b", 0, 0.3), room("c", 20, 0.5)
	_, paths, _ := counts(t, s, snap(a, b, c), 500)
	if paths[PathTwoChoices] != 500 {
		t.Fatalf("three fresh sites, two of unknown capacity: want two_choices, got %v", paths)
	}
	_, paths, _ = counts(t, s, snap(a, b), 500)
	if paths[PathBetweenTwo] != 500 {
		t.Fatalf("two fresh sites: want between_two, got %v", paths)
	}
}

func TestG31_TwoChoices(t *testing.T) {
	s := newTestStage(t, 11, nil)
	// Four sites at rho 0.2, 0.8, 0.5, 1.0 (no room: not in T1), equal
	// capacity: the rho-1.0 site and the heaviest of the three with room
	// are never picked; the lightest wins any pair it is in (2/3), the
	// middle one the pair with the heaviest (1/3).
	sn := snap(room("a", 10, 0.2), room("b", 10, 0.8), room("c", 10, 0.5), room("d", 10, 1.0))
	sites, paths, _ := counts(t, s, sn, 3000)
	if sites["d"] != 0 || sites["b"] != 0 {
		t.Fatalf("two_choices picked the full or the heaviest site: %v", sites)
	}
	within(t, "lightest", sites["a"], 2000)
	within(t, "middle", sites["c"], 1000)
	if paths[PathTwoChoices] != 3000 {
		t.Fatalf("paths: %v", paths)
	}
	// Ties keep the first draw, which is capacity weighted: 30/10/10 at
	// equal rho gives 60/20/20.
	sites, _, _ = counts(t, s, snap(room("a", 30, 0.4), room("b", 10, 0.4), room("c", 10, 0.4)), 3000)
	within(t, "a", sites["a"], 1800)
	within(t, "b", sites["b"], 600)
	within(t, "c", sites["c"], 600)
	// Tied candidates split evenly: 850 … 1150 of 3000 each.
	sites, _, _ = counts(t, s, snap(room("a", 10, 0.4), room("b", 10, 0.4), room("c", 10, 0.4)), 3000)
	for _, n := range []string{"a", "b", "c"} {
		if sites[n] < 850 || sites[n] > 1150 {
			t.Fatalf("even split: %v", sites)
		}
	}
	// The two draws are distinct: with a heavy site of capacity 1000 and a
	// light one of 1 (and a third), the light site still wins every pair
	// it is drawn into, which needs the second draw to exclude the first.
	sites, _, _ = counts(t, s, snap(room("h", 1000, 0.9), room("l", 1000, 0.1), room("x", 1, 0.5)), 3000)
	if sites["h"] != 0 {
		t.Fatalf("the heaviest of three won a pair: %v", sites)
	}
}

func TestG32_BetweenTwo(t *testing.T) {
	s := newTestStage(t, 13, nil)
	sites, paths, _ := counts(t, s, snap(room("a", 10, 0.3), room("b", 10, 0.3)), 4000)
	if sites["a"] < 1800 || sites["a"] > 2200 || paths[PathBetweenTwo] != 4000 {
		t.Fatalf("equal pair: %v %v", sites, paths)
	}
	// Capacity 100 at rho 0 against 10 at rho 0.9: 100 against 5.26, a
	// 95 % share clamped to 90 %: the slow site still gets 10 %.
	sites, _, _ = counts(t, s, snap(room("fast", 100, 0), room("slow", 10, 0.9)), 4000)
	if sites["slow"] < 280 || sites["slow"] > 520 {
		t.Fatalf("lopsided pair: %v", sites)
	}
	within(t, "slow", sites["slow"], 400)
	// capacity/(1+rho): 20/(1+0) against 20/(1+1) is 2/3 against 1/3.
	sites, _, _ = counts(t, s, snap(room("a", 20, 0), room("b", 20, 0.99)), 3000)
	within(t, "a", sites["a"], 3000*20/(20+20/1.99))
}

func TestG33_Lone(t *testing.T) {
	s := newTestStage(t, 7, nil)
	sites, paths, _ := counts(t, s, snap(room("a", 10, 0.5), notFull("b", 100, 0)), 500)
	if sites["a"] != 500 || paths[PathLone] != 500 {
		t.Fatalf("one site with room takes everything: %v %v", sites, paths)
	}
}

func TestG34_UnknownCapacityGetsTheMeanOfTheKnown(t *testing.T) {
	s := newTestStage(t, 17, nil)
	// T3 draws by capacity: 30, unknown (mean 20), 10.
	sites, _, _ := counts(t, s, snap(notFull("a", 30, 0), notFull("b", 0, 0), notFull("c", 10, 0)), 6000)
	within(t, "a", sites["a"], 3000)
	within(t, "b", sites["b"], 2000)
	within(t, "c", sites["c"], 1000)
	// All unknown: equal weights.
	sites, _, _ = counts(t, s, snap(notFull("a", 0, 0), notFull("b", 0, 0)), 3000)
	within(t, "a", sites["a"], 1500)
	within(t, "b", sites["b"], 1500)
	// In between_two too: unknown gets the known one's capacity.
	sites, _, _ = counts(t, s, snap(room("a", 0, 0), room("b", 40, 0)), 3000)
	within(t, "a", sites["a"], 1500)
}

func TestG35_MissingRhoDrawsByCapacity(t *testing.T) {
	s := newTestStage(t, 19, nil)
	b := room("b", 10, 0.1)
	b.RhoFresh = false
	sites, paths, _ := counts(t, s, snap(room("a", 30, 0.9), b), 4000)
	if paths[PathByCapacity] != 4000 {
		t.Fatalf("a stale rho must switch to by_capacity: %v", paths)
	}
	within(t, "a", sites["a"], 3000)
	within(t, "b", sites["b"], 1000)
	// No room anywhere: capacity 30 against 10 is 75/25.
	sites, _, _ = counts(t, s, snap(notFull("a", 30, 1), notFull("b", 10, 1)), 4000)
	within(t, "a", sites["a"], 3000)
	within(t, "b", sites["b"], 1000)
}

func TestG36_LeastQueueTie(t *testing.T) {
	s := newTestStage(t, 23, nil)
	sites, paths, _ := counts(t, s, snap(notFull("a", 10, 1), notFull("b", 10, 1), notFull("c", 1000, 2)), 2000)
	if sites["c"] != 0 || paths[PathQueueTie] != 2000 {
		t.Fatalf("T3: the deeper queue must leave the tie: %v %v", sites, paths)
	}
	within(t, "a", sites["a"], 1000)
	sites, paths, _ = counts(t, s, snap(full("a", 10, 3), full("b", 10, 2)), 500)
	if sites["b"] != 500 || paths[PathQueueTie] != 500 {
		t.Fatalf("T4: %v %v", sites, paths)
	}
	// Queue-only selection in T1 (no fresh rho): the tie applies too.
	a, b := room("a", 10, 0.1), room("b", 10, 0.1)
	a.RhoFresh, b.RhoFresh = false, false
	b.QueueDepth = 0.5
	sites, _, _ = counts(t, s, snap(a, b), 300)
	if sites["a"] != 300 {
		t.Fatalf("queue-only: %v", sites)
	}
	// No site has a queue reading: all tied.
	a.QueueDepth, b.QueueDepth = math.NaN(), math.NaN()
	_, paths, _ = counts(t, s, snap(a, b), 300)
	if paths[PathByCapacity] != 300 {
		t.Fatalf("no readings: %v", paths)
	}
}

func TestG37_DrawsArePureInTurnAndSalt(t *testing.T) {
	sn := snap(room("a", 10, 0.2), room("b", 20, 0.4), room("c", 30, 0.3), room("d", 5, 0.1))
	s1, s2, s3 := newTestStage(t, 42, nil), newTestStage(t, 42, nil), newTestStage(t, 43, nil)
	same, differ := 0, 0
	for turn := uint64(1); turn <= 1000; turn++ {
		a, b, c := s1.decide(sn, "m", &blockKeys{}, turn), s2.decide(sn, "m", &blockKeys{}, turn), s3.decide(sn, "m", &blockKeys{}, turn)
		if a != b {
			t.Fatalf("turn %d: same salt, different picks %s %s", turn, a.Site, b.Site)
		}
		if a.Site == c.Site {
			same++
		} else {
			differ++
		}
	}
	if differ < 200 {
		t.Fatalf("another salt draws in lock-step: %d same, %d differ", same, differ)
	}
	// A random salt at start.
	r1, r2 := newTestStage(t, 0, nil), newTestStage(t, 0, nil)
	if r1.salt == r2.salt {
		t.Fatal("two stages drew the same random salt")
	}
	// Decide advances the counter.
	s1.holder.Store(sn)
	s1.Decide("m", nil)
	s1.Decide("m", nil)
	if s1.turn.Load() != 2 {
		t.Fatalf("counter %d", s1.turn.Load())
	}
}

func TestG43_SilentSitesTakeNoRequestWhileOneLives(t *testing.T) {
	s := newTestStage(t, 29, nil)
	b := room("b", 1000, 0)
	b.Silent = true
	sites, _, reasons := counts(t, s, snap(full("a", 10, 5), b), 2000)
	if sites["b"] != 0 || reasons[ReasonFallback] != 0 {
		t.Fatalf("silent site picked: %v %v", sites, reasons)
	}
}

func TestG45_AllSilentTakeTheRequestAsFallback(t *testing.T) {
	s := newTestStage(t, 31, nil)
	a, b := room("a", 10, 0.2), room("b", 10, 0.2)
	a.Silent, b.Silent = true, true
	sites, _, reasons := counts(t, s, snap(a, b), 2000)
	if reasons[ReasonFallback] != 2000 {
		t.Fatalf("all silent: want every pick counted as fallback, got %v", reasons)
	}
	within(t, "a", sites["a"], 1000)
}

func TestG48_UnmeasuredTakesNoOverflow(t *testing.T) {
	s := newTestStage(t, 37, nil)
	u := notFull("u", 1000, 0)
	u.PublishesLoad = false
	sites, _, _ := counts(t, s, snap(full("a", 10, 9), u), 2000)
	if sites["u"] != 0 {
		t.Fatalf("unmeasured site took overflow: %v", sites)
	}
}

func TestG51_NoLoadRowsPeerTakesEveryPickWhenPublishersAreSilent(t *testing.T) {
	s := newTestStage(t, 41, nil)
	a := room("a", 10, 0.2)
	a.Silent = true
	peer := sitestate.Site{Name: "p", Cluster: "p-c", Gateway: "127.0.0.1:7", Ready: true, Telemetry: true}
	sites, _, reasons := counts(t, s, snap(a, peer), 1000)
	if sites["p"] != 1000 || reasons[ReasonFallback] != 1000 {
		t.Fatalf("G-51: %v %v", sites, reasons)
	}
}

func TestG57_EverySiteSilentAndDemotedTriesTheFrontCandidate(t *testing.T) {
	s := newTestStage(t, 43, nil)
	var ss []sitestate.Site
	for _, n := range []string{"a", "b", "c"} {
		x := room(n, 10, 0.2)
		x.Silent, x.Demoted = true, true
		ss = append(ss, x)
	}
	sites, _, reasons := counts(t, s, snap(ss...), 300)
	if sites["a"] != 300 || reasons[ReasonLastResort] != 300 {
		t.Fatalf("G-57: %v %v", sites, reasons)
	}
}

func TestG63_ShedModelIs429WithRetryAfter3To7(t *testing.T) {
	s := newTestStage(t, 47, nil)
	sn := snap(room("a", 10, 0.2))
	sn.Shed = []string{"m"}
	seen := map[time.Duration]int{}
	for turn := uint64(1); turn <= 100; turn++ {
		d := s.decide(sn, "m", &blockKeys{}, turn)
		r := d.Refusal
		if r == nil || r.StatusCode != http.StatusTooManyRequests || r.ErrorType != "rate_limit_exceeded" || r.Reason != "capacity_exhausted" || d.Reason != ReasonShed {
			t.Fatalf("turn %d: %+v %+v", turn, d, r)
		}
		seen[r.RetryAfter]++
	}
	for sec := 3; sec <= 7; sec++ {
		if seen[time.Duration(sec)*time.Second] != 20 {
			t.Fatalf("Retry-After spread: %v", seen)
		}
	}
	if len(seen) != 5 {
		t.Fatalf("Retry-After outside 3 … 7 s: %v", seen)
	}
	if d := s.decide(sn, "other", &blockKeys{}, 1); d.Refusal != nil {
		t.Fatal("another model was shed")
	}
	// A request kept local (inbound, subset hint) is shed too.
	s.holder.Store(sn)
	if d := s.KeepLocal("m", ReasonInbound); d.Refusal == nil || d.Refusal.StatusCode != http.StatusTooManyRequests || d.Reason != ReasonShed {
		t.Fatalf("inbound request of a shed model: %+v", d)
	}
}

func TestG64_UnknownModel404NoModel400(t *testing.T) {
	s := newTestStage(t, 53, nil)
	sn := &sitestate.Snapshot{Sites: []sitestate.Site{room("a", 10, 0.1)}, Known: []string{"m"}}
	sn.Sites[0].Models = []string{"m"}
	d := s.decide(sn, "nope", &blockKeys{}, 1)
	if d.Refusal == nil || d.Refusal.StatusCode != http.StatusNotFound || d.Refusal.Reason != "model_not_found" || d.Reason != ReasonModelNotFound {
		t.Fatalf("unknown model: %+v", d.Refusal)
	}
	d = s.decide(sn, "", &blockKeys{}, 1)
	if d.Refusal == nil || d.Refusal.StatusCode != http.StatusBadRequest || d.Reason != ReasonNoModel {
		t.Fatalf("no model: %+v", d.Refusal)
	}
	if d := s.decide(sn, "m", &blockKeys{}, 1); d.Refusal != nil || d.Site != "a" {
		t.Fatalf("known model: %+v", d)
	}
	// Known, but its only site is unready: 503 no_healthy_site.
	sn.Sites[0].Ready = false
	d = s.decide(sn, "m", &blockKeys{}, 1)
	if d.Refusal == nil || d.Refusal.StatusCode != http.StatusServiceUnavailable || d.Refusal.Reason != "no_healthy_site" || d.Refusal.ErrorType != "server_error" {
		t.Fatalf("no healthy site: %+v", d.Refusal)
	}
}

func TestNoSnapshotRoutesLocal(t *testing.T) {
	s := newTestStage(t, 1, nil)
	d := s.Decide("m", nil)
	if !d.Local || d.Site != "a" || d.Cluster != "a-c" || d.Reason != ReasonFallback {
		t.Fatalf("%+v", d)
	}
	if d := s.KeepLocal("m", ReasonInbound); !d.Local || d.Site != "a" || d.Reason != ReasonInbound || d.Path != "" {
		t.Fatalf("%+v", d)
	}
}

func TestRemoteDecisionCarriesGateway(t *testing.T) {
	s := newTestStage(t, 1, nil)
	l := room("a", 10, 0.1)
	l.Local, l.Gateway = true, ""
	r := room("b", 10, 0.1)
	r.Gateway = "127.0.0.2:8080"
	seen := map[string]string{}
	for turn := uint64(1); turn < 200; turn++ {
		d := s.decide(snap(l, r), "m", &blockKeys{}, turn)
		if d.Local == (d.Gateway != "") {
			t.Fatalf("%+v", d)
		}
		seen[d.Site] = d.Gateway
	}
	if seen["b"] != "127.0.0.2:8080" || seen["a"] != "" {
		t.Fatalf("%v", seen)
	}
}

// TestMetricsClosedLabelSets pins the path and reason sets and checks
// what a decision counts.
func TestMetricsClosedLabelSets(t *testing.T) {
	wantPaths := "lone between_two two_choices by_capacity queue_tie fallback"
	if got := strings.Join(Paths, " "); got != wantPaths {
		t.Fatalf("paths: %s", got)
	}
	wantReasons := "room queued not_full healthy fallback last_resort inbound subset_hint shed no_route model_not_found no_model"
	if got := strings.Join(Reasons, " "); got != wantReasons {
		t.Fatalf("reasons: %s", got)
	}
	reg := prometheus.NewPedanticRegistry()
	s := newTestStage(t, 5, reg)
	sn := snap(room("a", 10, 0.1), room("b", 10, 0.1))
	sn.Shed = []string{"shed"}
	s.holder.Store(sn)
	for i := 0; i < 10; i++ {
		s.Decide("m", nil)
	}
	s.Decide("shed", nil)
	s.KeepLocal("m", ReasonInbound)
	if got := counterValue(t, s.selections[1]); got != 10 {
		t.Fatalf("between_two %v", got)
	}
	if got := counterValue(t, s.decisions.WithLabelValues("", ReasonShed)); got != 1 {
		t.Fatalf("shed %v", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	// 6 paths; 4 refusal series, a/room, b/room, a/inbound.
	if n != 6+4+3 {
		t.Fatalf("series: %d", n)
	}
}

func TestAffinityOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o    AffinityOptions
		want string
	}{
		{AffinityOptions{MaxBlocks: 65}, "affinity.maxBlocks"},
		{AffinityOptions{TableBlocks: 1000}, "affinity.tableBlocks"},
		{AffinityOptions{BlockBytes: -1}, "affinity.blockBytes"},
		{AffinityOptions{MaxBlocks: 4, MinRun: 5}, "affinity.minRun"},
	} {
		err := c.o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c.o, err)
		}
	}
	if err := (&AffinityOptions{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{LocalSite: "a"}); err == nil {
		t.Fatal("no Holder")
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestDecisionCountersFollowTheSnapshot: the per-snapshot counter cache
// counts each decision on its site's series, across snapshots whose site
// order differs.
func TestDecisionCountersFollowTheSnapshot(t *testing.T) {
	s := newTestStage(t, 3, prometheus.NewRegistry())
	only := func(name string, others ...string) *sitestate.Snapshot {
		sites := []sitestate.Site{}
		for _, o := range others {
			x := room(o, 10, 0.1)
			x.Ready = false
			sites = append(sites, x)
		}
		return snap(append(sites, room(name, 10, 0.1))...)
	}
	s.holder.Store(only("b", "a"))
	for i := 0; i < 5; i++ {
		s.Decide("m", nil)
	}
	s.holder.Store(only("a", "b", "c"))
	for i := 0; i < 3; i++ {
		s.Decide("m", nil)
	}
	s.holder.Store(only("c"))
	s.KeepLocal("m", ReasonInbound) // no local site in the snapshot: the option's name
	if got := counterValue(t, s.decisions.WithLabelValues("b", ReasonRoom)); got != 5 {
		t.Fatalf("b %v", got)
	}
	if got := counterValue(t, s.decisions.WithLabelValues("a", ReasonRoom)); got != 3 {
		t.Fatalf("a %v", got)
	}
	if got := counterValue(t, s.decisions.WithLabelValues("a", ReasonInbound)); got != 1 {
		t.Fatalf("a inbound %v", got)
	}
}

// TestG24_SharedPrefixKeepsTheCapacitySplit: 3000 requests sharing a
// 1 KiB leading prefix (then a question of their own) over three equal
// T1 sites land within ±15 % of 1000 per site, mostly on two_choices:
// the affinity only chooses between the two drawn sites (review finding
// 2; before, one site took all 3000).
func TestG24_SharedPrefixKeepsTheCapacitySplit(t *testing.T) {
	h := &sitestate.Holder{}
	h.Store(snap(room("a", 10, 0.2), room("b", 10, 0.2), room("c", 10, 0.2)))
	s, err := New(Options{Holder: h, LocalSite: "a", Seed: 17})
	if err != nil {
		t.Fatal(err)
	}
	shared := strings.Repeat("You are a helpful assistant. ", 36)[:4*DefaultBlockBytes]
	sites, paths := map[string]int{}, map[string]int{}
	for i := range 3000 {
		q := fmt.Sprintf("%s question %d: %s", shared, i, strings.Repeat("why? ", 60+i%7))
		d := s.Decide("m", []byte(q))
		sites[d.Site]++
		paths[d.Path]++
	}
	for _, n := range []string{"a", "b", "c"} {
		within(t, "site "+n, sites[n], 1000)
	}
	if paths[PathTwoChoices] != 3000 {
		t.Fatalf("paths: %v", paths)
	}
}

// TestG57_AffinityCannotOverrideTheFrontCandidate: with every site
// demoted, the last resort is the front candidate even when the
// request's prefix was recorded for another one (review finding 7).
func TestG57_AffinityCannotOverrideTheFrontCandidate(t *testing.T) {
	s, err := New(Options{Holder: &sitestate.Holder{}, LocalSite: "x", Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	var k blockKeys
	k.compute(s.aff, []byte(strings.Repeat("a prompt recorded for b. ", 80)))
	s.aff.record(&k, siteKey("b", "b-c"))
	a, b := room("a", 10, 0.2), room("b", 10, 0.2)
	a.Demoted, b.Demoted = true, true
	for turn := uint64(1); turn <= 100; turn++ {
		if d := s.decide(snap(a, b), "m", &k, turn); d.Site != "a" || d.Reason != ReasonLastResort {
			t.Fatalf("turn %d: got %s (%s), want the front candidate a as the last resort", turn, d.Site, d.Reason)
		}
	}
}
