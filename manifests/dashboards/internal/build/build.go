// Package build defines Switchyard's Grafana dashboards with the typed
// builders of github.com/grafana/grafana-foundation-sdk/go and its
// PrometheusRule alerts as Go values. The generator (../../gen) writes
// them out; the dashboards package's tests check that the committed files
// equal what this package builds. Only manifests/dashboards and its
// generator import it; it starts no goroutines.
package build

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Dashboard variables. Label variables are regex matchers (`=~"$namespace"`)
// whose "All" value is `.*`, which also matches a series without the label.
const (
	VarDatasource = "datasource"
	VarNamespace  = "namespace"
	VarJob        = "job"
)

// Label selectors used by the panels.
const (
	// epp selects the EPP's series: the scrape's namespace and job.
	epp = `namespace=~"$namespace",job=~"$job"`
	// ns selects by namespace only: the site-relay's and model servers'
	// series, which another job exports.
	ns = `namespace=~"$namespace"`
	// rate is Grafana's rate window.
	rate = `$__rate_interval`
)

// Dashboard is one generated dashboard: its file name (without .json) and
// its JSON.
type Dashboard struct {
	Name string
	JSON []byte
}

// Dashboards builds every dashboard, in a fixed order.
func Dashboards() ([]Dashboard, error) {
	specs := []spec{poolOverview(), perEndpoint(), pluginsStrategies(), flowControl(), multiSite()}
	out := make([]Dashboard, 0, len(specs))
	for _, s := range specs {
		b, err := s.build()
		if err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", s.name, err)
		}
		out = append(out, Dashboard{Name: s.name, JSON: b})
	}
	return out, nil
}

// kind is a panel's visualisation.
type kind int

const (
	kindTimeseries kind = iota
	kindStat
	kindStateTimeline
)

type target struct {
	expr, legend string
}

type panel struct {
	kind        kind
	title, desc string
	unit        string
	width       uint32
	max         *float64
	mappings    []dashboard.ValueMapping
	targets     []target
}

// row groups panels under a title ("" puts them at the top without a row).
type row struct {
	title  string
	panels []panel
}

type spec struct {
	name, uid, title, desc string
	// job adds the $job variable (the EPP's scrape job).
	job  bool
	rows []row
}

func ts(title, desc, unit string, targets ...target) panel {
	return panel{kind: kindTimeseries, title: title, desc: desc, unit: unit, width: 12, targets: targets}
}

func t(expr, legend string) target { return target{expr: expr, legend: legend} }

func datasourceRef() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + VarDatasource + "}")}
}

func (s spec) build() ([]byte, error) {
	b := dashboard.NewDashboardBuilder(s.title).
		Uid(s.uid).
		Description(s.desc).
		Tags([]string{"switchyard", "inference-gateway"}).
		Editable().
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder(VarDatasource).
			Label("Data source").
			Type("prometheus")).
		WithVariable(labelVariable(VarNamespace, "Namespace", `label_values(inference_extension_info, namespace)`))
	if s.job {
		b = b.WithVariable(labelVariable(VarJob, "EPP job", `label_values(inference_extension_info{namespace=~"$namespace"}, job)`))
	}
	id := uint32(1)
	for _, r := range s.rows {
		if r.title != "" {
			b = b.WithRow(dashboard.NewRowBuilder(r.title).Id(id))
			id++
		}
		for _, p := range r.panels {
			b = b.WithPanel(p.builder(id))
			id++
		}
	}
	d, err := b.Build()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func labelVariable(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(datasourceRef()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		IncludeAll(true).
		AllValue(".*").
		Current(dashboard.VariableOption{
			Selected: cog.ToPtr(true),
			Text:     dashboard.StringOrArrayOfString{String: cog.ToPtr("All")},
			Value:    dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")},
		})
}

func (p panel) builder(id uint32) cog.Builder[dashboard.Panel] {
	width := p.width
	if width == 0 {
		width = 12
	}
	var targets []*prometheus.DataqueryBuilder
	for i, tg := range p.targets {
		q := prometheus.NewDataqueryBuilder().
			Datasource(datasourceRef()).
			RefId(string(rune('A' + i))).
			Expr(tg.expr).
			LegendFormat(tg.legend)
		if p.kind == kindStat {
			q = q.Instant()
		} else {
			q = q.Range()
		}
		targets = append(targets, q)
	}
	switch p.kind {
	case kindStat:
		pb := stat.NewPanelBuilder().Id(id).Title(p.title).Description(p.desc).
			Datasource(datasourceRef()).Span(width).Height(6).Unit(p.unit).
			GraphMode(common.BigValueGraphModeNone).ColorMode(common.BigValueColorModeValue)
		for _, q := range targets {
			pb = pb.WithTarget(q)
		}
		return pb
	case kindStateTimeline:
		pb := statetimeline.NewPanelBuilder().Id(id).Title(p.title).Description(p.desc).
			Datasource(datasourceRef()).Span(width).Height(8).Unit(p.unit)
		if p.mappings != nil {
			pb = pb.Mappings(p.mappings)
		}
		for _, q := range targets {
			pb = pb.WithTarget(q)
		}
		return pb
	default:
		pb := timeseries.NewPanelBuilder().Id(id).Title(p.title).Description(p.desc).
			Datasource(datasourceRef()).Span(width).Height(8).Unit(p.unit).
			Min(0).
			Legend(common.NewVizLegendOptionsBuilder().
				DisplayMode(common.LegendDisplayModeList).
				Placement(common.LegendPlacementBottom).
				ShowLegend(true)).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
		if p.max != nil {
			pb = pb.Max(*p.max)
		}
		for _, q := range targets {
			pb = pb.WithTarget(q)
		}
		return pb
	}
}
