package e2e

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/manifests/dashboards"
)

// Where the queries and alerts of TestPrometheusDashboardsAndAlerts come
// from: the dashboards and the PrometheusRule of manifests/dashboards.

// panelQuery is one panel target's expression, Grafana variables
// expanded to plain PromQL.
type panelQuery struct {
	dashboard, panel, refID string
	expr                    string
}

func (p panelQuery) String() string {
	return fmt.Sprintf("dashboard %q panel %q query %s", p.dashboard, p.panel, p.refID)
}

// dashboardQueries returns every panel query of the dashboards, Grafana
// variables expanded.
func dashboardQueries() ([]panelQuery, error) {
	qs, err := dashboards.Queries()
	if err != nil {
		return nil, err
	}
	out := make([]panelQuery, 0, len(qs))
	for _, q := range qs {
		out = append(out, panelQuery{dashboard: q.Dashboard, panel: q.Panel, refID: q.RefID, expr: dashboards.Expand(q.Expr)})
	}
	return out, nil
}

// alertRules returns the PrometheusRule's alerts (for: as written; the
// test shortens it).
func alertRules() ([]promRule, error) {
	as, err := dashboards.Alerts()
	if err != nil {
		return nil, err
	}
	out := make([]promRule, 0, len(as))
	// The test's scrape jobs are named per site (epp-a, site-relay-b),
	// not after the overlay's Services: the target-down alert watches
	// those instead.
	jobs := strconv.Quote(dashboards.TargetJobs)
	for _, a := range as {
		expr := strings.ReplaceAll(a.Expr, jobs, `"epp-.+|site-relay-.+"`)
		out = append(out, promRule{Alert: a.Name, Expr: expr, For: a.For, Labels: a.Labels})
	}
	return out, nil
}

// provokedAlerts: which alert each fault the test provokes must fire.
var provokedAlerts = []provokedAlert{
	// The killed sim's EPP reports it stale (its scrapes fail).
	{fault: "endpoint killed", alert: "SwitchyardEndpointMetricsStale", match: map[string]string{"job": "epp-$"}},
	{fault: "broken config reload", alert: "SwitchyardConfigReloadFailing", match: map[string]string{"job": "epp-$"}},
	// The cut site's EPP no longer gets its relay's signals, and the
	// other site's relay no longer polls the cut one.
	{fault: "relay cut", alert: "SwitchyardRelayPollFailing", match: map[string]string{"job": "epp-$"}},
	{fault: "relay cut", alert: "SwitchyardSiteSilent", match: map[string]string{"peer": "$"}},
	// Prometheus's scrapes of the stopped relay fail.
	{fault: "relay cut", alert: "SwitchyardTargetDown", match: map[string]string{"job": "site-relay-$"}},
	// Every model server of the site gone: its EPP's health checks take
	// them out of rotation.
	{fault: "site's endpoints killed", alert: "SwitchyardNoReadyEndpoints", match: map[string]string{"job": "epp-$"}},
}

// promSkippedNames: metric names the static check may not find in a
// scrape, each with its reason. Every other name the dashboards and
// alerts use is exposed in TestPrometheusDashboardsAndAlerts' scenario.
var promSkippedNames = map[string]string{
	"up": "Prometheus's own series per target, not exposed by a target",
}

// promSkippedPanels: panels (by panelQuery.String) that cannot get data
// from the scenario, each with its reason. None.
var promSkippedPanels = map[string]string{}

func promSkipped(name string) bool {
	_, ok := promSkippedNames[name]
	return ok
}

func promSkippedPanel(p panelQuery) (string, bool) {
	reason, ok := promSkippedPanels[p.String()]
	return reason, ok
}
