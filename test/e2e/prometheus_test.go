package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The dashboards and alerts of issue 16 against a real Prometheus: two
// sites of the multi-site grid (grid_test.go), each with modelsim
// servers, an EPP with flow control, the prefix cache, scorers, health
// check and circuit breaker, a strategy picker (site a) or the
// engine-load-picker (site b), a site-relay and the in-repo gateway; a
// Prometheus process scraping every EPP (with its metrics token), relay
// and sim every second; traffic that queues in flow control, is refused,
// fails now and then at b and crosses sites. Then every metric name of the
// dashboards and alerts is in a scrape, through Prometheus's HTTP API
// every panel query returns data and every alert expression evaluates,
// and the alerts the test provokes (an endpoint killed, a broken
// configuration reload, a relay stopped, every endpoint of a site killed)
// fire.

// promScenarioConfig is both sites' EPP configuration (site b swaps the
// picker by a reload): GIE's default scorers (prefix cache included), the
// engine-load and usage-weight terms (quota-aware observation on), the
// circuit breaker and an active health check, before a strategy picker
// (scorer-vs-strategy decisions); flow control on with the pool saturated
// at two requests per endpoint (the sims' batch size), so bursts queue;
// the availability block of gridConfig (shedding on, relays polled every
// 300 ms).
const promScenarioConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
availability:
  shedding: true
  freshnessWindowMs: 2000
  ceilingFloor: 1
  fullAfterMs: 1000
  roomAfterMs: 1000
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: 2}
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: engine-load-scorer
- type: usage-weight-scorer
  parameters:
    weight: 0.2
    quotaAware: {enabled: true, ttl: 5s}
- type: active-health-check
  parameters: {interval: 300ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1}
- type: circuit-breaker
  parameters: {consecutiveFailures: 2, openDuration: 2s, successThreshold: 1}
- type: strategy-picker
  parameters: {strategy: RoundRobin}
- type: single-profile-handler
- {name: rr, type: round-robin-fairness-policy}
saturationDetector:
  pluginRef: concurrency-detector
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: engine-load-scorer
    weight: 1
  - pluginRef: usage-weight-scorer
  - pluginRef: circuit-breaker
  - pluginRef: strategy-picker
flowControl:
  maxBytes: 2Mi
  defaultRequestTTL: 20s
  defaultPriorityBand: {fairnessPolicyRef: rr}
  priorityBands:
  - {priority: 10, fairnessPolicyRef: rr}
`

// alertFor is the longest for: of the test's rule file: the PrometheusRule's
// durations (minutes) are shortened so that a provoked alert fires within
// the test; the expressions themselves are the PrometheusRule's.
const alertFor = 2 * time.Second

// promLoad is background traffic through site a's gateway: 24 clients
// at once (over the pool's capacity of 2 per endpoint, so flow control
// queues and site a sends work to b), two tenants, two objectives,
// prompts that share a system prompt (prefix cache hits), and now and
// then a body that is not JSON (refused).
type promLoad struct {
	s      *gridSite
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sent   atomic.Int64
	status sync.Map // int -> *atomic.Int64
}

func startPromLoad(t *testing.T, s *gridSite) *promLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &promLoad{s: s, cancel: cancel}
	for w := range 24 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				tenant := []string{"tenant-a", "tenant-b"}[w%2]
				objective := []string{"critical", "standard"}[(w/2)%2]
				prompt := systemPrompt(w%3) + fmt.Sprintf(" Worker %d asks question %d.", w, i)
				if w == 23 && i%5 == 4 {
					// A body that is not JSON now and then: the EPP
					// refuses it (400 bad_request).
					l.post(ctx, tenant, objective, `{"model":`)
					continue
				}
				l.post(ctx, tenant, objective, fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":24}`, modelName, prompt))
			}
		}()
	}
	t.Cleanup(l.stop)
	return l
}

func (l *promLoad) post(ctx context.Context, tenant, objective, body string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.s.gateway+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-gateway-inference-fairness-id", tenant)
	req.Header.Set("x-gateway-inference-objective", objective)
	resp, err := l.s.client.Do(req)
	l.sent.Add(1)
	if err != nil {
		l.count(0)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	l.count(resp.StatusCode)
}

func (l *promLoad) count(status int) {
	v, _ := l.status.LoadOrStore(status, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (l *promLoad) statuses() map[int]int64 {
	out := map[int]int64{}
	l.status.Range(func(k, v any) bool {
		out[k.(int)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (l *promLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// promSource is one scraped process: its Prometheus job and /metrics.
type promSource struct {
	job, site, url, token string
}

func TestPrometheusDashboardsAndAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("two sites of processes and a Prometheus")
	}
	promBin := promBinary(t)
	panels, err := dashboardQueries()
	require.NoError(t, err, "the dashboards' queries")
	require.NotEmpty(t, panels)
	alerts, err := alertRules()
	require.NoError(t, err, "the PrometheusRule's alerts")
	require.NotEmpty(t, alerts)

	dir := t.TempDir()
	objectives := filepath.Join(dir, "objectives.yaml")
	require.NoError(t, os.WriteFile(objectives, []byte("objectives:\n- {name: critical, priority: 10}\n- {name: standard, priority: 0}\n"), 0o600))
	simArgs := []string{"--max-running", "2", "--decode-base", "5ms"}
	eppArgs := []string{"--objectives-file", objectives}
	g := startGrid(t, gridOpts{sites: []string{"a", "b"}, config: promScenarioConfig, site: map[string]gridSiteOpts{
		"a": {sims: 2, simArgs: simArgs, eppArgs: eppArgs},
		// b's sims answer one generation request in ten with a 500, so
		// that its EPP's circuit breakers open and close (two failures
		// in a row) and the errors are counted.
		"b": {sims: 2, simArgs: append(slices.Clone(simArgs), "--error-rate", "0.1"), eppArgs: eppArgs},
	}})
	a, b := g.site("a"), g.site("b")
	// Site b's picker becomes the engine-load-picker, by a hot reload of
	// its configuration file (the plugins dashboard charts both the
	// strategy-picker's decisions, at a, and the engine-load-picker's,
	// at b; a profile has one picker).
	reloads := func() float64 {
		return seriesAt(t, b.metrics+"/metrics", metricsToken)[series("switchyard_config_reloads_total", "result", "success")]
	}
	before := reloads()
	bConfig := strings.Replace(promScenarioConfig, "- type: strategy-picker\n  parameters: {strategy: RoundRobin}\n", "- type: engine-load-picker\n", 1)
	bConfig = strings.Replace(bConfig, "  - pluginRef: strategy-picker\n", "  - pluginRef: engine-load-picker\n", 1)
	require.NotEqual(t, promScenarioConfig, bConfig)
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "config.yaml"), []byte(bConfig), 0o600))
	require.Eventually(t, func() bool { return reloads() > before }, 30*time.Second, 100*time.Millisecond, "site b never reloaded its configuration")

	// Every process Prometheus scrapes, by job (the dashboards select
	// by metric name and their own labels, not by job).
	var sources []promSource
	var targets []promTarget
	for _, s := range []*gridSite{a, b} {
		sources = append(sources,
			promSource{job: "epp-" + s.name, site: s.name, url: s.metrics + "/metrics", token: metricsToken},
			promSource{job: "site-relay-" + s.name, site: s.name, url: s.relayAdmin + "/metrics"})
		for i, addr := range s.simAddr {
			sources = append(sources, promSource{job: s.simName[i], site: s.name, url: "http://" + addr + "/metrics"})
		}
	}
	for _, src := range sources {
		targets = append(targets, promTarget{job: src.job, addr: strings.TrimSuffix(strings.TrimPrefix(src.url, "http://"), "/metrics"),
			token: src.token, labels: map[string]string{"site": src.site}})
	}
	var rules []promRule
	for _, r := range alerts {
		r.For = shortenFor(r.For, alertFor)
		rules = append(rules, r)
	}
	ruleFile := writeRuleFile(t, rules)
	prom := startPrometheus(t, promBin, targets, ruleFile)
	prom.targetsUp(t, len(targets))

	load := startPromLoad(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	t.Run("every alert expression evaluates without error", func(t *testing.T) {
		for _, r := range alerts {
			_, err := prom.query(ctx, r.Expr)
			require.NoError(t, err, "alert %s: %s", r.Alert, r.Expr)
		}
		// And the rule manager evaluated every rule without error.
		require.Eventually(t, func() bool {
			h, err := prom.ruleHealth(ctx)
			require.NoError(t, err)
			for _, r := range alerts {
				if h[r.Alert] != "ok" {
					t.Logf("rule %s: %q", r.Alert, h[r.Alert])
					return false
				}
			}
			return true
		}, 30*time.Second, time.Second, "every rule evaluated, health ok")
	})

	// Nothing is broken yet: none of the alerts the test provokes fires
	// (otherwise their firing below would prove nothing).
	for _, pa := range provokedAlerts {
		f, err := prom.firing(ctx, pa.alert)
		require.NoError(t, err)
		require.Empty(t, f, "%s fires before the test provoked it", pa.alert)
	}
	waitFiring := func(t *testing.T, alert string, match map[string]string) {
		t.Helper()
		var got []map[string]string
		require.Eventually(t, func() bool {
			var err error
			got, err = prom.firing(ctx, alert)
			require.NoError(t, err)
			for _, l := range got {
				ok := true
				for k, v := range match {
					ok = ok && l[k] == v
				}
				if ok {
					return true
				}
			}
			return false
		}, 90*time.Second, time.Second, "%s never fired with %v (firing: %v)", alert, match, got)
	}

	t.Run("an endpoint killed fires its alert", func(t *testing.T) {
		// While the traffic runs, so that b's EPP sees the failures
		// (connection refused: breaker and health-check transitions,
		// which the per-endpoint dashboard charts).
		b.sims[1].stop(syscall.SIGKILL)
		for _, pa := range provoked("endpoint killed") {
			waitFiring(t, pa.alert, pa.labels("b"))
		}
	})

	t.Run("every metric a panel or alert uses is exposed after the traffic", func(t *testing.T) {
		// The names every expression uses, and where they are used.
		usedBy := map[string][]string{}
		for _, p := range panels {
			names, err := exprMetricNames(p.expr)
			require.NoError(t, err, "%s: %s", p, p.expr)
			for _, n := range names {
				usedBy[n] = append(usedBy[n], p.String())
			}
		}
		for _, r := range alerts {
			names, err := exprMetricNames(r.Expr)
			require.NoError(t, err, "alert %s: %s", r.Alert, r.Expr)
			for _, n := range names {
				usedBy[n] = append(usedBy[n], "alert "+r.Alert)
			}
		}
		// Scrape every process until each name showed up once (some
		// appear only under load: queued requests, refusals), at most a
		// minute of traffic.
		seen := map[string]string{}
		deadline := time.Now().Add(60 * time.Second)
		for {
			for _, src := range sources {
				if src.job == b.simName[1] {
					continue // killed above
				}
				got, err := exposedNames(ctx, src.url, src.token)
				require.NoError(t, err, src.job)
				for n := range got {
					if _, ok := seen[n]; !ok {
						seen[n] = src.job
					}
				}
			}
			var missing []string
			for n := range usedBy {
				if _, ok := seen[n]; !ok && !promSkipped(n) {
					missing = append(missing, n)
				}
			}
			if len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				slices.Sort(missing)
				var b strings.Builder
				for _, n := range missing {
					fmt.Fprintf(&b, "\n  %s, used by %s", n, strings.Join(usedBy[n], "; "))
				}
				t.Fatalf("%d metric names no running EPP, site-relay or modelsim exposes after %d requests (statuses %v):%s",
					len(missing), load.sent.Load(), load.statuses(), b.String())
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("%d metric names, all exposed; %d requests so far (statuses %v)", len(usedBy), load.sent.Load(), load.statuses())
	})

	t.Run("every panel query returns data through Prometheus's HTTP API", func(t *testing.T) {
		// While the traffic runs: each query, Grafana variables expanded,
		// must return at least one sample that is a number (not NaN) at
		// some evaluation within 90 s (queue gauges only hold series
		// while requests wait).
		pending := slices.Clone(panels)
		last := map[string]string{}
		deadline := time.Now().Add(90 * time.Second)
		for len(pending) > 0 && time.Now().Before(deadline) {
			var next []panelQuery
			for _, p := range pending {
				if reason, ok := promSkippedPanel(p); ok {
					t.Logf("skipped %s: %s", p, reason)
					continue
				}
				res, err := prom.query(ctx, p.expr)
				require.NoError(t, err, "%s: %s", p, p.expr)
				if res.Finite == 0 {
					last[p.String()] = res.String()
					next = append(next, p)
				}
			}
			pending = next
			if len(pending) > 0 {
				time.Sleep(time.Second)
			}
		}
		var b strings.Builder
		for _, p := range pending {
			fmt.Fprintf(&b, "\n  %s: %s (%s)", p, p.expr, last[p.String()])
		}
		require.Empty(t, pending, "%d of %d panel queries returned no data in 90 s of traffic (statuses %v):%s",
			len(pending), len(panels), load.statuses(), b.String())
	})

	load.stop()
	t.Logf("traffic: %d requests, statuses %v", load.sent.Load(), load.statuses())

	t.Run("a broken configuration reload fires its alert", func(t *testing.T) {
		cfgFile := filepath.Join(a.dir, "config.yaml")
		require.NoError(t, os.WriteFile(cfgFile, []byte("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins: [{type: no-such-plugin}]\n"), 0o600))
		for _, pa := range provoked("broken config reload") {
			waitFiring(t, pa.alert, pa.labels("a"))
		}
	})

	t.Run("a relay cut fires its alerts", func(t *testing.T) {
		b.relay.stop(syscall.SIGTERM)
		for _, pa := range provoked("relay cut") {
			waitFiring(t, pa.alert, pa.labels("b"))
		}
	})

	t.Run("every endpoint of a site killed fires its alert", func(t *testing.T) {
		// b.sims[1] was killed above; with b.sims[0] gone too, b's
		// active health checks take both out of rotation.
		b.sims[0].stop(syscall.SIGKILL)
		for _, pa := range provoked("site's endpoints killed") {
			waitFiring(t, pa.alert, pa.labels("b"))
		}
	})
}

// provokedAlert names an alert a provoked fault must fire and the labels
// that tie it to the fault (label -> value, "$" standing for the faulty
// site), from the PrometheusRule.
type provokedAlert struct {
	fault, alert string
	match        map[string]string
}

func (pa provokedAlert) labels(site string) map[string]string {
	out := map[string]string{}
	for k, v := range pa.match {
		out[k] = strings.ReplaceAll(v, "$", site)
	}
	return out
}

// provoked returns the alerts fault must fire.
func provoked(fault string) []provokedAlert {
	var out []provokedAlert
	for _, pa := range provokedAlerts {
		if pa.fault == fault {
			out = append(out, pa)
		}
	}
	if len(out) == 0 {
		panic("no provoked alert for " + fault)
	}
	return out
}
