package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A real Prometheus server (Debian's prometheus package, installed by
// hack/prometheus.sh, which .ci/run runs) for the tests that chart a
// running EPP and site-relay: the test writes its configuration (scrape
// and evaluation every second, one job per target) and rule file, starts
// it on loopback with its TSDB in a temporary folder, and reads it
// through its HTTP API (/api/v1/query, /api/v1/alerts, /api/v1/targets).

// promBinary finds the prometheus binary on PATH. Without it the test is
// skipped, or fails when SWITCHYARD_REQUIRE_PROMETHEUS=1 (.ci/run sets
// it). (promtool check rules on the PrometheusRule is
// manifests/dashboards' test.)
func promBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		msg := "prometheus not on PATH (hack/prometheus.sh installs it)"
		if os.Getenv("SWITCHYARD_REQUIRE_PROMETHEUS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// promTarget is one scrape job.
type promTarget struct {
	job    string
	addr   string // host:port
	token  string // bearer token, "" for none
	labels map[string]string
}

// promServer is a running Prometheus.
type promServer struct {
	base   string // http://127.0.0.1:port
	proc   *proc
	client *http.Client
}

// promConfig renders prometheus.yml: every target its own job, scraped
// every second; rules evaluated every second from ruleFile.
func promConfig(dir string, targets []promTarget, ruleFile string) (string, error) {
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n")
	if ruleFile != "" {
		fmt.Fprintf(&b, "rule_files:\n- %q\n", ruleFile)
	}
	b.WriteString("scrape_configs:\n")
	for i, tg := range targets {
		fmt.Fprintf(&b, "- job_name: %q\n  metrics_path: /metrics\n", tg.job)
		if tg.token != "" {
			f := filepath.Join(dir, fmt.Sprintf("token-%d", i))
			if err := os.WriteFile(f, []byte(tg.token), 0o600); err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "  authorization: {type: Bearer, credentials_file: %q}\n", f)
		}
		fmt.Fprintf(&b, "  static_configs:\n  - targets: [%q]\n", tg.addr)
		if len(tg.labels) > 0 {
			b.WriteString("    labels:\n")
			for k, v := range tg.labels {
				fmt.Fprintf(&b, "      %s: %q\n", k, v)
			}
		}
	}
	return b.String(), nil
}

// startPrometheus starts Prometheus scraping targets, with the rules of
// ruleFile ("" for none), and waits until it is ready.
func startPrometheus(t *testing.T, bin string, targets []promTarget, ruleFile string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg, err := promConfig(dir, targets, ruleFile)
	require.NoError(t, err)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(cfg), 0o600))
	port := freePort(t)
	p := &promServer{base: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), client: &http.Client{Timeout: 20 * time.Second}}
	p.proc = startProc(t, "prometheus", bin,
		"--config.file="+cfgFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		// Rate windows of the dashboards (a minute or more) see every
		// sample of the test; look back no further than the test lasts.
		"--query.lookback-delta=1m",
		"--log.level=warn")
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := p.client.Get(p.base + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-p.proc.done:
			t.Fatalf("prometheus exited:\n%s", strings.Join(p.proc.lines(), "\n"))
		case <-time.After(100 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "prometheus not ready in 60s:\n%s", strings.Join(p.proc.lines(), "\n"))
	}
	return p
}

// promResponse is the envelope of every /api/v1 answer.
type promResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings"`
}

func (p *promServer) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	u := p.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	var r promResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("GET %s: %s: %v: %.200s", path, resp.Status, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("GET %s: %s: %s: %s", path, resp.Status, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// promResult is an instant query's result: its type, how many samples
// (series of a vector; 1 for a scalar) it holds and how many of them are
// numbers (not NaN, which a histogram_quantile or a division of rates
// over no events gives, and Grafana shows as no value), with the first
// few series for messages.
type promResult struct {
	Type    string
	Samples int
	Finite  int
	Series  []string
}

func (r promResult) String() string {
	return fmt.Sprintf("%s with %d samples, %d of them numbers: %v", r.Type, r.Samples, r.Finite, r.Series)
}

// finite reports whether a sample value of the API ("1.5", "NaN",
// "+Inf") is a number other than NaN.
func finite(v string) bool {
	f, err := strconv.ParseFloat(v, 64)
	return err == nil && !math.IsNaN(f)
}

// query evaluates expr at the current time (/api/v1/query).
func (p *promServer) query(ctx context.Context, expr string) (promResult, error) {
	data, err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return promResult{}, err
	}
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return promResult{}, err
	}
	out := promResult{Type: d.ResultType}
	switch d.ResultType {
	case "vector":
		var rs []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &rs); err != nil {
			return out, err
		}
		out.Samples = len(rs)
		for i, r := range rs {
			if v, ok := r.Value[1].(string); ok && finite(v) {
				out.Finite++
			}
			if i < 3 {
				out.Series = append(out.Series, fmt.Sprint(r.Metric, " ", r.Value[1]))
			}
		}
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return out, err
		}
		out.Samples = 1
		if s, ok := v[1].(string); ok && finite(s) {
			out.Finite = 1
		}
	default:
		return out, fmt.Errorf("unknown result type %q", d.ResultType)
	}
	return out, nil
}

// promAlert is one alert of /api/v1/alerts.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// alerts lists the pending and firing alerts.
func (p *promServer) alerts(ctx context.Context) ([]promAlert, error) {
	data, err := p.get(ctx, "/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	err = json.Unmarshal(data, &d)
	return d.Alerts, err
}

// firing returns the labels of the firing alerts named name.
func (p *promServer) firing(ctx context.Context, name string) ([]map[string]string, error) {
	as, err := p.alerts(ctx)
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, a := range as {
		if a.Labels["alertname"] == name && a.State == "firing" {
			out = append(out, a.Labels)
		}
	}
	return out, nil
}

// ruleHealth reads /api/v1/rules: every rule's name, health ("ok",
// "err", "unknown") and last error.
func (p *promServer) ruleHealth(ctx context.Context) (map[string]string, error) {
	data, err := p.get(ctx, "/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var d struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			out[r.Name] = r.Health
			if r.LastError != "" {
				out[r.Name] += ": " + r.LastError
			}
		}
	}
	return out, nil
}

// targetsUp waits until every target was scraped successfully once.
func (p *promServer) targetsUp(t *testing.T, n int) {
	t.Helper()
	var last string
	require.Eventually(t, func() bool {
		data, err := p.get(context.Background(), "/api/v1/targets", url.Values{"state": {"active"}})
		if err != nil {
			last = err.Error()
			return false
		}
		var d struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			last = err.Error()
			return false
		}
		up := 0
		var down []string
		for _, tg := range d.ActiveTargets {
			if tg.Health == "up" {
				up++
			} else {
				down = append(down, tg.ScrapeURL+" "+tg.Health+" "+tg.LastError)
			}
		}
		last = fmt.Sprintf("%d of %d up; down: %v", up, len(d.ActiveTargets), down)
		return len(d.ActiveTargets) == n && up == n
	}, 60*time.Second, 200*time.Millisecond, "prometheus targets: %s", func() string { return last }())
}

// promRule is one alerting rule of the test's rule file.
type promRule struct {
	Alert  string
	Expr   string
	For    string // Prometheus duration, "" for none
	Labels map[string]string
}

// writeRuleFile writes rules as one Prometheus rule group (Prometheus
// refuses to start on a file it cannot load).
func writeRuleFile(t *testing.T, rules []promRule) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("groups:\n- name: switchyard-e2e\n  interval: 1s\n  rules:\n")
	for _, r := range rules {
		fmt.Fprintf(&b, "  - alert: %s\n    expr: %s\n", r.Alert, yamlString(r.Expr))
		if r.For != "" {
			fmt.Fprintf(&b, "    for: %s\n", r.For)
		}
		if len(r.Labels) > 0 {
			b.WriteString("    labels:\n")
			for k, v := range r.Labels {
				fmt.Fprintf(&b, "      %s: %s\n", k, yamlString(v))
			}
		}
	}
	f := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(f, []byte(b.String()), 0o600))
	return f
}

// yamlString quotes s for YAML (JSON strings are YAML strings).
func yamlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// shortenFor caps an alert's for: duration at limit, so that a test of
// a few minutes sees its alerts fire; a Prometheus duration that does not
// parse is kept as it is (promtool reports it).
func shortenFor(d string, limit time.Duration) string {
	if d == "" {
		return ""
	}
	v, err := parsePromDuration(d)
	if err != nil || v <= limit {
		return d
	}
	return limit.String()
}

var promDurationRE = regexp.MustCompile(`^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$`)

// parsePromDuration parses Prometheus's duration syntax (1h30m, 5m, 2d).
func parsePromDuration(s string) (time.Duration, error) {
	m := promDurationRE.FindStringSubmatch(s)
	if m == nil || s == "" {
		return 0, fmt.Errorf("not a Prometheus duration: %q", s)
	}
	units := []time.Duration{365 * 24 * time.Hour, 7 * 24 * time.Hour, 24 * time.Hour, time.Hour, time.Minute, time.Second, time.Millisecond}
	var d time.Duration
	for i, u := range units {
		if m[i+1] != "" {
			n, err := strconv.Atoi(m[i+1])
			if err != nil {
				return 0, err
			}
			d += time.Duration(n) * u
		}
	}
	return d, nil
}
