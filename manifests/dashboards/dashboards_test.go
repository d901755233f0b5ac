package dashboards

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/switchyard-ai/switchyard/manifests/dashboards/internal/build"
)

// TestGeneratedFilesUpToDate fails when a committed generated file differs
// from what the generator produces now.
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := build.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(f.Path)))
		if err != nil {
			t.Errorf("%s: %v (run go generate ./manifests/dashboards)", f.Path, err)
			continue
		}
		if !bytes.Equal(got, f.Data) {
			t.Errorf("%s differs from the generator's output: run go generate ./manifests/dashboards\n%s", f.Path, cmp.Diff(string(f.Data), string(got)))
		}
	}
	// No stray dashboard: every committed JSON is generated.
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := build.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range ds {
		want = append(want, d.Name)
	}
	sort.Strings(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("Names() (-generated +committed):\n%s", diff)
	}
}

func TestQueries(t *testing.T) {
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	perDashboard := map[string]int{}
	seen := map[string]bool{}
	for _, q := range qs {
		perDashboard[q.Dashboard]++
		if q.Panel == "" || q.RefID == "" {
			t.Errorf("%s: a query without panel title or refId: %+v", q.Dashboard, q)
		}
		k := q.Dashboard + "/" + q.Panel + "/" + q.RefID
		if seen[k] {
			t.Errorf("duplicate query %s", k)
		}
		seen[k] = true
	}
	for _, name := range []string{"pool-overview", "per-endpoint", "plugins-strategies", "flow-control", "multi-site"} {
		if perDashboard[name] == 0 {
			t.Errorf("dashboard %s has no queries", name)
		}
	}
	// Every panel queries something.
	for _, name := range mustNames(t) {
		d, err := Decode(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range d.Panels {
			if p.Panel != nil && len(p.Panel.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", name, *p.Panel.Title)
			}
			if p.Panel != nil && (p.Panel.Description == nil || *p.Panel.Description == "") {
				t.Errorf("%s: panel %q has no description", name, *p.Panel.Title)
			}
		}
	}
}

func mustNames(t *testing.T) []string {
	t.Helper()
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestExpand(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
	}{
		{"rate interval", `rate(x[$__rate_interval])`, `rate(x[1m])`},
		{"braced rate interval", `rate(x[${__rate_interval}])`, `rate(x[1m])`},
		{"interval and range", `avg_over_time(x[$__interval]) + increase(y[$__range])`, `avg_over_time(x[15s]) + increase(y[5m])`},
		{"label variables", `x{namespace=~"$namespace",job=~"${job}"}`, `x{namespace=~".*",job=~".*"}`},
		{"no variable", `sum(x)`, `sum(x)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Expand(tt.in); got != tt.want {
				t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// expr is one expression to check, named for error messages.
type expr struct{ where, expr string }

func allExprs(t *testing.T) []expr {
	t.Helper()
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	var out []expr
	for _, q := range qs {
		out = append(out, expr{where: q.Dashboard + ": " + q.Panel + " " + q.RefID, expr: Expand(q.Expr)})
	}
	as, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		out = append(out, expr{where: "alert " + a.Name, expr: a.Expr})
	}
	return out
}

// metricNames parses e with the Prometheus parser and returns the metric
// names its selectors use, with _bucket, _sum and _count stripped from
// histogram series that do not exist under their own name.
func metricNames(t *testing.T, e expr) []string {
	t.Helper()
	if strings.Contains(e.expr, "$") {
		t.Errorf("%s: a variable Expand did not replace: %s", e.where, e.expr)
	}
	node, err := parser.NewParser(parser.Options{}).ParseExpr(e.expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", e.where, err, e.expr)
		return nil
	}
	var names []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				t.Errorf("%s: a selector without a metric name: %s", e.where, vs)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	if len(names) == 0 {
		t.Errorf("%s: selects no metric: %s", e.where, e.expr)
	}
	return names
}

// prometheusSeries are the series Prometheus itself writes per target.
var prometheusSeries = map[string]string{"up": "1 if the target's last scrape succeeded"}

// TestExpressionsUseDeclaredMetrics parses every dashboard and alert
// expression and checks every metric it selects is one Switchyard, its
// plugins, the site-relay or a model server declares.
func TestExpressionsUseDeclaredMetrics(t *testing.T) {
	declared := declaredMetrics(t)
	for _, e := range allExprs(t) {
		for _, n := range metricNames(t, e) {
			if _, ok := declared[n]; ok {
				continue
			}
			if _, ok := prometheusSeries[n]; ok {
				continue
			}
			if _, ok := seriesLabels(declared, n); ok {
				continue
			}
			t.Errorf("%s: metric %s is declared by nothing Switchyard runs", e.where, n)
		}
	}
}

// TestMultiSiteCoversGridSeries checks that every grid_route_* and
// grid_signals_* metric appears in the multi-site dashboard.
func TestMultiSiteCoversGridSeries(t *testing.T) {
	used := map[string]bool{}
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Dashboard != "multi-site" {
			continue
		}
		for _, n := range metricNames(t, expr{where: q.Panel, expr: Expand(q.Expr)}) {
			used[n] = true
		}
	}
	var missing []string
	for n := range declaredMetrics(t) {
		if (strings.HasPrefix(n, "grid_route_") || strings.HasPrefix(n, "grid_signals_")) && !used[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the multi-site dashboard lacks %v", missing)
	}
}

// TestAlertsMatchPrometheusRule decodes the committed PrometheusRule and
// compares its rules with Alerts(), and checks every rule has what an
// on-call reader needs.
func TestAlertsMatchPrometheusRule(t *testing.T) {
	obj := readPrometheusRule(t)
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" {
		t.Fatalf("apiVersion/kind = %s/%s", obj.APIVersion, obj.Kind)
	}
	var fromYAML []Alert
	for _, g := range obj.Spec.Groups {
		for _, r := range g.Rules {
			fromYAML = append(fromYAML, Alert{Group: g.Name, Name: r.Alert, Expr: r.Expr, For: r.For, Labels: r.Labels, Annotations: r.Annotations})
		}
	}
	as, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromYAML, as); diff != "" {
		t.Errorf("Alerts() differs from prometheusrule.yaml (-yaml +Alerts):\n%s", diff)
	}
	wantAlerts := []string{"SwitchyardNoReadyEndpoints", "SwitchyardRefusalRatioHigh", "SwitchyardEndpointMetricsStale",
		"SwitchyardConfigReloadFailing", "SwitchyardRelayPollFailing", "SwitchyardModelShedding", "SwitchyardSiteSilent",
		"SwitchyardFlowControlQueueNearCapacity"}
	have := map[string]bool{}
	for i, a := range as {
		have[a.Name] = true
		if a.For == "" {
			t.Errorf("alerts[%d] %s: no for", i, a.Name)
		}
		if s := a.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alerts[%d] %s: labels.severity = %q", i, a.Name, s)
		}
		if a.Annotations["summary"] == "" || len(a.Annotations["description"]) < 100 {
			t.Errorf("alerts[%d] %s: annotations need a summary and a description that says what to check", i, a.Name)
		}
	}
	for _, n := range wantAlerts {
		if !have[n] {
			t.Errorf("no alert %s", n)
		}
	}
}

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []build.RuleGroup `json:"groups"`
	} `json:"spec"`
}

func readPrometheusRule(t *testing.T) prometheusRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(build.PrometheusRuleFile)))
	if err != nil {
		t.Fatal(err)
	}
	var obj prometheusRule
	if err := yaml.UnmarshalStrict(raw, &obj); err != nil {
		t.Fatalf("%s: %v", build.PrometheusRuleFile, err)
	}
	return obj
}

// TestPromtoolCheckRules writes the PrometheusRule's spec as a plain rules
// file and runs `promtool check rules` on it. promtool comes from Debian's
// prometheus package; without it the test skips, unless
// SWITCHYARD_REQUIRE_PROMETHEUS=1 makes its absence a failure.
func TestPromtoolCheckRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("promtool not on PATH and SWITCHYARD_REQUIRE_PROMETHEUS=1: %v", err)
		}
		t.Skip("promtool not on PATH (Debian package prometheus); set SWITCHYARD_REQUIRE_PROMETHEUS=1 to make this a failure")
	}
	obj := readPrometheusRule(t)
	rules, err := yaml.Marshal(map[string]any{"groups": obj.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "switchyard.rules.yaml")
	if err := os.WriteFile(file, rules, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), promtool, "check", "rules", file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules did not report SUCCESS:\n%s", out)
	}
	t.Logf("promtool: %s", bytes.TrimSpace(out))
}
