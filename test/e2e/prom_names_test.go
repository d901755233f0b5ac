package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

// exprMetricNames parses a PromQL expression with Prometheus's own parser
// and returns the metric names its selectors use (the name before the
// braces, or an equality matcher on __name__), sorted and unique. A
// selector without a fixed name (a regular expression on __name__) is an
// error: nothing could show that a scrape exposes it.
func exprMetricNames(expr string) ([]string, error) {
	// Default options: the PromQL of Prometheus 2.x, no experimental
	// functions (the Prometheus that runs these is Debian's 2.42).
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName {
				continue
			}
			if m.Type != labels.MatchEqual {
				bad = fmt.Errorf("selector %s: no fixed metric name", vs)
				continue
			}
			name = m.Value
		}
		if name == "" && bad == nil {
			bad = fmt.Errorf("selector %s: no metric name", vs)
		}
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
		return nil
	})
	slices.Sort(names)
	return names, bad
}

// exposedNames scrapes a /metrics endpoint and returns the sample names
// it exposes with at least one series, as PromQL sees them: a histogram
// family f is f_bucket, f_sum and f_count; a summary f is f, f_sum and
// f_count; other families their own name.
func exposedNames(ctx context.Context, url, token string) (map[string]bool, error) {
	fams, err := fetchFamilies(ctx, url, token)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for name, f := range fams {
		if len(f.GetMetric()) == 0 {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = true, true, true
		default:
			out[name] = true
		}
	}
	return out, nil
}

// TestExprMetricNames: the names the static check looks for, from
// expressions of the shapes the dashboards use.
func TestExprMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr  string
		names []string
		err   bool
	}{
		{expr: `sum(rate(switchyard_request_refusals_total[1m])) by (reason)`, names: []string{"switchyard_request_refusals_total"}},
		{expr: `histogram_quantile(0.99, sum by (le) (rate(inference_objective_request_duration_seconds_bucket{model_name=~".+"}[5m])))`,
			names: []string{"inference_objective_request_duration_seconds_bucket"}},
		{expr: `sum(rate(a_total[1m])) / clamp_min(sum(rate(b_total[1m])) + sum(rate(a_total[1m])), 1)`, names: []string{"a_total", "b_total"}},
		{expr: `{__name__="grid_route_site_rho", site="a"}`, names: []string{"grid_route_site_rho"}},
		{expr: `time() - max(grid_signals_last_success_timestamp_seconds) > 30`, names: []string{"grid_signals_last_success_timestamp_seconds"}},
		{expr: `vector(1)`, names: nil},
		{expr: `{__name__=~"grid_.+"}`, err: true},
		{expr: `sum(rate(x[1m]) by (`, err: true},
	} {
		got, err := exprMetricNames(tc.expr)
		if tc.err {
			require.Error(t, err, tc.expr)
			continue
		}
		require.NoError(t, err, tc.expr)
		require.Equal(t, tc.names, got, tc.expr)
	}
}
