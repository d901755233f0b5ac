package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The multi-site routing of issue 13 end to end, on the three-site grid
// of grid_test.go: site a's gateway takes every client request, its EPP
// chooses a site (learned capacity, pressure tiers, silence, shedding),
// and a remote site's gateway and EPP serve it on their own pods.

// gridConfig is every EPP's configuration: GIE's default profile and an
// availability block tuned to the test's relays (polls every 300 ms):
// shedding on, a 2 s freshness window, ceilings from 1, and full / room
// after 1 s.
const gridConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
availability:
  shedding: true
  freshnessWindowMs: 2000
  ceilingFloor: 1
  fullAfterMs: 1000
  roomAfterMs: 1000
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: max-score-picker
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: max-score-picker
`

// ledger keeps every client reply of the test, for the accounting at the
// end.
type ledger struct {
	mu      sync.Mutex
	replies []gridReply
	phase   []string
}

func (l *ledger) add(phase string, rs ...gridReply) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		l.replies = append(l.replies, r)
		l.phase = append(l.phase, phase)
	}
}

// bySite counts the OK replies by x-grid-site.
func bySite(rs []gridReply) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		if r.err == nil && r.status == http.StatusOK {
			out[r.site]++
		}
	}
	return out
}

// requireServed requires every reply to be a 200 that names its site.
func requireServed(t *testing.T, rs []gridReply) {
	t.Helper()
	for i, r := range rs {
		require.NoError(t, r.err, "reply %d", i)
		require.Equal(t, http.StatusOK, r.status, "reply %d: %s", i, r.body)
		require.Contains(t, []string{"a", "b", "c"}, r.site, "reply %d names its site", i)
	}
}

// hold keeps n long requests open at a sim, bypassing every EPP (they
// load the sim, so its site looks busy, and are never counted as routed);
// the returned function ends them and waits.
func hold(t *testing.T, simAddr string, n, maxTokens int) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":%q,"prompt":"hold %d","max_tokens":%d}`, modelName, i, maxTokens)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+simAddr+"/v1/completions", strings.NewReader(body))
			req.Header.Set("content-type", "application/json")
			if resp, err := client.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}()
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			client.CloseIdleConnections()
		})
	}
	t.Cleanup(stop)
	return stop
}

// servedAt sums what the site's EPP counts as served by its sims.
func servedAt(t *testing.T, s *gridSite) uint64 {
	t.Helper()
	var n uint64
	for _, v := range s.served(t) {
		n += v
	}
	return n
}

func TestMultisiteRouting(t *testing.T) {
	if testing.Short() {
		t.Skip("three sites of processes")
	}
	// Different capacities: a 2×4, b 3×8, c 1×2 running sequences; c
	// also decodes slowly, so it is the one to overload.
	g := startGrid(t, gridOpts{sites: []string{"a", "b", "c"}, config: gridConfig, site: map[string]gridSiteOpts{
		"a": {sims: 2, simArgs: []string{"--max-running", "4"}},
		"b": {sims: 3, simArgs: []string{"--max-running", "8"}},
		"c": {sims: 1, simArgs: []string{"--max-running", "2", "--decode-base", "30ms"}},
	}})
	a, b, c := g.site("a"), g.site("b"), g.site("c")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	var all ledger

	t.Run("G-10..G-17, G-31: traffic splits by learned capacity", func(t *testing.T) {
		// Learn: bursts well over every site's capacity, so each site
		// shows its limit (work waiting) and its plateau.
		for round := range 3 {
			rs := a.burst(ctx, 60, 40, 120, "learn"+strconv.Itoa(round))
			all.add("learn", rs...)
			requireServed(t, rs)
		}
		view := a.learnedView(t)
		require.Greater(t, view["b"].Ceiling, view["c"].Ceiling, "b (3×8) has the larger learned ceiling than c (1×2): %+v", view)
		// Measure at a load every site has room for at times.
		rs := a.burst(ctx, 150, 12, 60, "split")
		all.add("split", rs...)
		requireServed(t, rs)
		after := a.learnedView(t)
		n := bySite(rs)
		t.Logf("split: %v, learned before %+v, after %+v", n, view, after)
		// The split follows what a learned, which is not always the
		// hardware: on a loaded machine a sim's step can lag, so a sample
		// shows a request waiting below its max-running; the learner takes
		// that as a demonstrated limit (G-11) and keeps it for
		// ceilingHalfLifeMs. So every pair of sites whose learned ceilings
		// differ clearly (1.5×, before and after the split) must split in
		// that order; b over c always does (24 vs 2 running sequences).
		ordered := 0
		for _, pair := range [][2]string{{"b", "c"}, {"b", "a"}, {"a", "c"}} {
			hi, lo := pair[0], pair[1]
			if view[lo].Ceiling > view[hi].Ceiling {
				hi, lo = lo, hi
			}
			if view[hi].Ceiling < 1.5*view[lo].Ceiling || after[hi].Ceiling < 1.5*after[lo].Ceiling {
				continue
			}
			ordered++
			require.Greater(t, n[hi], n[lo], "%s (learned ceiling %.1f) takes more than %s (%.1f): %v", hi, view[hi].Ceiling, lo, view[lo].Ceiling, n)
		}
		require.Positive(t, ordered, "no two sites learned clearly different ceilings: %+v", view)
		top := "a"
		for _, s := range []string{"b", "c"} {
			if view[s].Ceiling > view[top].Ceiling {
				top = s
			}
		}
		require.Positive(t, n["a"]+n["b"]+n["c"]-n[top], "the sites below %s take some too (explore floor, G-17): %v", top, n)
	})

	t.Run("G-16, G-22: overloading one site moves new requests to the others", func(t *testing.T) {
		// 8 long requests at c's one server of 2 running sequences: 6
		// wait, about 18 s of work (short enough that a request a sends
		// there anyway is served within the client's timeout).
		stop := hold(t, c.simAddr[0], 8, 1500)
		// Judged by a's view, not by time: c is full (at its ceiling with
		// work waiting for fullAfterMs), so no tier but the last (every
		// site full) holds it.
		require.Eventually(t, func() bool {
			v := a.learnedView(t)["c"]
			return v.Full && !v.Room
		}, 30*time.Second, 50*time.Millisecond, "a never saw c full: %+v", a.learnedView(t))
		rs := a.burst(ctx, 60, 6, 40, "overload")
		all.add("overload", rs...)
		requireServed(t, rs)
		n := bySite(rs)
		t.Logf("with c overloaded: %v", n)
		require.LessOrEqual(t, n["c"], 2, "c, full, gets (almost) nothing while a and b are not: %v", n)
		stop()
		require.Eventually(t, func() bool { return a.learnedView(t)["c"].Room }, 30*time.Second, 50*time.Millisecond, "c has room again")
	})

	t.Run("G-40, G-43, G-44: a cut relay link: silent, no request, back after two samples", func(t *testing.T) {
		b.cut()
		cutAt := time.Now()
		healed := false
		defer func() {
			if !healed {
				b.heal()
			}
		}()
		require.Eventually(t, func() bool { return a.learnedView(t)["b"].Silent }, 30*time.Second, 50*time.Millisecond, "b never went silent")
		t.Logf("b silent %s after the cut", time.Since(cutAt).Round(time.Millisecond))
		before := servedAt(t, b)
		rs := a.burst(ctx, 40, 6, 40, "cut")
		all.add("cut", rs...)
		requireServed(t, rs)
		n := bySite(rs)
		require.Zero(t, n["b"], "a silent site gets no request while others live: %v", n)
		require.Equal(t, before, servedAt(t, b), "b's servers served nothing through its EPP meanwhile")

		// Two samples bring b back (G-44): each successful poll of b by
		// relay a carries at most one new sample of b, so b returns no
		// sooner than relay a's second successful poll after the heal.
		okPolls := series("grid_peer_poll_total", "peer", "b", "outcome", "ok")
		ok0 := seriesAt(t, a.relayAdmin+"/metrics", "")[okPolls]
		b.heal()
		healed = true
		healAt := time.Now()
		require.Eventually(t, func() bool { return !a.learnedView(t)["b"].Silent }, 30*time.Second, 50*time.Millisecond, "b never returned")
		okBack := seriesAt(t, a.relayAdmin+"/metrics", "")[okPolls]
		t.Logf("b back %s after the heal, %v successful polls of b by relay a since", time.Since(healAt).Round(time.Millisecond), okBack-ok0)
		require.GreaterOrEqual(t, okBack-ok0, 2.0, "b returned on fewer than two samples")
		// And it takes requests again.
		deadline := time.Now().Add(30 * time.Second)
		for {
			rs := a.burst(ctx, 20, 6, 40, "healed")
			all.add("healed", rs...)
			requireServed(t, rs)
			if bySite(rs)["b"] > 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "b, back, never got a request")
		}
	})

	t.Run("G-61..G-63: shedding: every site full gives 429 with Retry-After, then routing resumes", func(t *testing.T) {
		var stops []func()
		for _, s := range []*gridSite{a, b, c} {
			for _, addr := range s.simAddr {
				stops = append(stops, hold(t, addr, 24, 4000))
			}
		}
		// Judged by a's view, not by time: the model is shed once every
		// site was full for fullAfterMs.
		last := time.Now()
		require.Eventually(t, func() bool {
			v, shedding := a.learned(t)
			if time.Since(last) > 2*time.Second {
				t.Logf("waiting for shedding: %+v", v)
				last = time.Now()
			}
			return shedding
		}, 40*time.Second, 50*time.Millisecond, "a never shed the model with every site full")
		var shed gridReply
		require.Eventually(t, func() bool {
			shed = a.send(ctx, "shed", 4)
			all.add("shed", shed)
			return shed.err == nil && shed.status == http.StatusTooManyRequests
		}, 10*time.Second, 20*time.Millisecond, "no 429 while shedding: %+v", shed)
		ra, err := strconv.Atoi(shed.retryAfter)
		require.NoError(t, err, "Retry-After %q", shed.retryAfter)
		require.GreaterOrEqual(t, ra, 3)
		require.LessOrEqual(t, ra, 7)
		require.Contains(t, shed.body, "rate_limit_exceeded")
		for _, stop := range stops {
			stop()
		}
		stoppedAt := time.Now()
		require.Eventually(t, func() bool {
			r := a.send(ctx, "resume probe", 4)
			all.add("resume", r)
			return r.err == nil && r.status == http.StatusOK
		}, 30*time.Second, 100*time.Millisecond, "routing never resumed")
		t.Logf("routing resumed %s after the overload ended (roomAfterMs 1000)", time.Since(stoppedAt).Round(time.Millisecond))
	})

	t.Run("G-65: every request is accounted for and names its site, none forwarded twice", func(t *testing.T) {
		all.mu.Lock()
		rs, phases := append([]gridReply(nil), all.replies...), append([]string(nil), all.phase...)
		all.mu.Unlock()
		ok := map[string]uint64{}
		for i, r := range rs {
			require.NoError(t, r.err, "reply %d (%s)", i, phases[i])
			switch r.status {
			case http.StatusOK:
				require.Contains(t, []string{"a", "b", "c"}, r.site, "reply %d (%s) names its site", i, phases[i])
				require.Equal(t, r.site, r.backend, "reply %d: x-grid-backend is the site's cluster", i)
				require.True(t, strings.HasPrefix(r.sim, r.site+"-sim-"), "reply %d (%s): x-grid-site %s but served by %s", i, phases[i], r.site, r.sim)
				ok[r.site]++
			case http.StatusTooManyRequests:
				require.Contains(t, []string{"shed", "resume"}, phases[i], "reply %d: a 429 outside the shedding phase", i)
			default:
				t.Fatalf("reply %d (%s): status %d: %s", i, phases[i], r.status, r.body)
			}
		}
		// Each site's EPP served exactly the replies naming it (the held
		// requests bypass the EPPs): nothing lost, nothing served twice.
		for _, s := range []*gridSite{a, b, c} {
			require.Eventually(t, func() bool { return servedAt(t, s) == ok[s.name] }, 20*time.Second, 50*time.Millisecond,
				"site %s: served %d, replies naming it %d", s.name, servedAt(t, s), ok[s.name])
		}
		// b and c only ever scheduled locally what a sent them (reason
		// inbound), each exactly once: nothing they got was forwarded
		// again, and a's decisions for them are exactly what they served.
		// The one exception: the receiving site judges shedding too
		// (KeepLocal's model checks), and when shedding ends each EPP's
		// room_after_ms runs out on its own samples, so a request a sends
		// in that moment can be shed (429) at b or c. Such a refusal is a
		// reply of the shedding phases (checked above) and is counted once,
		// here.
		refusal := map[string]bool{"shed": true, "no_route": true, "model_not_found": true, "no_model": true}
		am := seriesAt(t, a.metrics+"/metrics", metricsToken)
		shedTotal := am[series("grid_route_decisions_total", "reason", "shed", "site", "")]
		for _, s := range []*gridSite{b, c} {
			m := seriesAt(t, s.metrics+"/metrics", metricsToken)
			var inbound, shed float64
			for k, v := range m {
				if !strings.HasPrefix(k, "grid_route_decisions_total{") || v == 0 {
					continue
				}
				switch k {
				case series("grid_route_decisions_total", "reason", "inbound", "site", s.name):
					inbound = v
				case series("grid_route_decisions_total", "reason", "shed", "site", ""):
					shed = v
				default:
					t.Fatalf("site %s decided something other than an inbound request: %s %v", s.name, k, v)
				}
			}
			require.Equal(t, float64(ok[s.name]), inbound, "site %s: inbound requests vs replies naming it", s.name)
			shedTotal += shed
			var routed float64
			for k, v := range am {
				if strings.HasPrefix(k, "grid_route_decisions_total{") && strings.Contains(k, fmt.Sprintf(`site=%q`, s.name)) {
					reason := k[strings.Index(k, `reason="`)+len(`reason="`):]
					reason = reason[:strings.Index(reason, `"`)]
					if !refusal[reason] {
						routed += v
					}
				}
			}
			require.Equal(t, float64(ok[s.name])+shed, routed, "a's decisions for %s vs replies naming it and the ones it shed", s.name)
		}
		tooMany := 0
		for _, r := range rs {
			if r.status == http.StatusTooManyRequests {
				tooMany++
			}
		}
		require.Equal(t, float64(tooMany), shedTotal, "every 429 is one shedding decision, at a or at the receiving site")
		t.Logf("served: %v (requests: %d)", ok, len(rs))
	})
}
