package dashboards

//go:generate go run ./gen

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"

	"github.com/switchyard-ai/switchyard/manifests/dashboards/internal/build"
)

//go:embed *.json
var files embed.FS

// Query is one PromQL query of a dashboard panel.
type Query struct {
	// Dashboard is the dashboard's file name without .json
	// ("pool-overview").
	Dashboard string
	// Panel is the panel's title.
	Panel string
	// RefID is the query's refId within the panel ("A", "B"…).
	RefID string
	// Expr is the PromQL expression, with Grafana's variables in it (see
	// Expand).
	Expr string
}

// Alert is one alerting rule of the PrometheusRule.
type Alert struct {
	// Group is the rule group's name.
	Group string
	// Name is the alert's name (the rule's "alert").
	Name string
	// Expr is the PromQL expression; it uses no Grafana variable.
	Expr string
	// For is how long the expression must hold before the alert fires
	// ("1m").
	For string
	// Labels are the alert's labels (severity).
	Labels map[string]string
	// Annotations are summary and description.
	Annotations map[string]string
}

// TargetJobs is the regex of the scrape jobs the SwitchyardTargetDown alert
// watches: the job names the monitoring overlay's ServiceMonitors produce.
const TargetJobs = build.TargetJobs

var registerPlugins sync.Once

// Names returns the dashboards' names (file names without .json), sorted.
func Names() ([]string, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names, nil
}

// JSON returns the committed JSON of the dashboard name.
func JSON(name string) ([]byte, error) {
	return files.ReadFile(name + ".json")
}

// Decode decodes the dashboard name with the SDK's typed model.
func Decode(name string) (dashboard.Dashboard, error) {
	registerPlugins.Do(plugins.RegisterDefaultPlugins)
	var d dashboard.Dashboard
	raw, err := JSON(name)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("dashboard %s: %w", name, err)
	}
	return d, nil
}

// Queries returns every panel query of every dashboard, in dashboard name
// order and then panel order. A target that is not a Prometheus query, or
// has no expression, is an error: every panel here queries Prometheus.
func Queries() ([]Query, error) {
	names, err := Names()
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, name := range names {
		d, err := Decode(name)
		if err != nil {
			return nil, err
		}
		var panels []dashboard.Panel
		for _, p := range d.Panels {
			switch {
			case p.Panel != nil:
				panels = append(panels, *p.Panel)
			case p.RowPanel != nil:
				panels = append(panels, p.RowPanel.Panels...)
			}
		}
		for i, p := range panels {
			title := ""
			if p.Title != nil {
				title = *p.Title
			}
			for j, tg := range p.Targets {
				q, ok := tg.(*prometheus.Dataquery)
				if !ok {
					return nil, fmt.Errorf("dashboard %s: panels[%d] %q: targets[%d]: not a Prometheus query (%T)", name, i, title, j, tg)
				}
				if q.Expr == "" {
					return nil, fmt.Errorf("dashboard %s: panels[%d] %q: targets[%d].expr: empty", name, i, title, j)
				}
				ref := ""
				if q.RefId != nil {
					ref = *q.RefId
				}
				out = append(out, Query{Dashboard: name, Panel: title, RefID: ref, Expr: q.Expr})
			}
		}
	}
	return out, nil
}

// Values Expand gives Grafana's variables.
const (
	// RateInterval replaces $__rate_interval: four 15 s scrape intervals.
	RateInterval = "1m"
	// Interval replaces $__interval.
	Interval = "15s"
	// Range replaces $__range.
	Range = "5m"
	// AllLabels replaces a label variable ($namespace, $job): the regex
	// every dashboard matcher (=~"$var") compares with, so "All" matches
	// any value, the empty one (no such label) included.
	AllLabels = ".*"
)

var expander = strings.NewReplacer(
	"${__rate_interval}", RateInterval, "$__rate_interval", RateInterval,
	"${__interval}", Interval, "$__interval", Interval,
	"${__range}", Range, "$__range", Range,
	"${"+build.VarNamespace+"}", AllLabels, "$"+build.VarNamespace, AllLabels,
	"${"+build.VarJob+"}", AllLabels, "$"+build.VarJob, AllLabels,
)

// Expand replaces Grafana's variables in expr ($__rate_interval,
// $__interval, $__range and the dashboards' label variables $namespace and
// $job, also in the ${name} form) with values a plain Prometheus can
// evaluate: RateInterval, Interval, Range and AllLabels.
func Expand(expr string) string { return expander.Replace(expr) }

// Alerts returns the alerting rules of the PrometheusRule
// (manifests/overlays/monitoring/prometheusrule.yaml, generated from the
// same definitions; a test keeps the two equal), in group and rule order.
func Alerts() ([]Alert, error) {
	var out []Alert
	for _, g := range build.RuleGroups() {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				return nil, fmt.Errorf("group %s: an alert without a name or expr", g.Name)
			}
			out = append(out, Alert{Group: g.Name, Name: r.Alert, Expr: r.Expr, For: r.For, Labels: copyMap(r.Labels), Annotations: copyMap(r.Annotations)})
		}
	}
	return out, nil
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
