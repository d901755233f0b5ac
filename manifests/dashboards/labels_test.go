package dashboards

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/metrics"
	"github.com/switchyard-ai/switchyard/pkg/server"
)

// targetLabels are the labels Prometheus (and the Prometheus Operator's
// ServiceMonitors and PodMonitors) add to every series of a target; an
// expression may group or match on them whatever the metric.
var targetLabels = []string{"job", "namespace", "instance", "pod", "service", "container", "endpoint"}

// closedValues are the label values of metrics whose set is closed and
// exported as constants: a matcher on one of them must use those values.
// Refusal reasons are open (admission plugins add theirs), but the ones an
// expression names must be the server's.
var closedValues = map[[2]string][]string{
	{"switchyard_endpoints", "state"}:       {server.StateRoutable, server.StateHalfOpen, server.StateStale, server.StateUnhealthy, server.StateBreakerOpen},
	{"switchyard_endpoint_health", "state"}: {server.StateRoutable, server.StateHalfOpen, server.StateStale, server.StateUnhealthy, server.StateBreakerOpen},
	{"switchyard_request_refusals_total", "reason"}: {
		extproc.ReasonBadRequest, extproc.ReasonBodyTooLarge, extproc.ReasonBodyTimeout, extproc.ReasonBufferExhausted,
		extproc.ReasonNoEndpoints, extproc.ReasonSubsetNoMatch, extproc.ReasonNoneScheduled, extproc.ReasonProtocol,
		extproc.ReasonInternal, extproc.ReasonShedSaturation, extproc.ReasonQueueFull, extproc.ReasonTTLExpired, extproc.ReasonFlowStopped,
	},
	{"inference_extension_flow_control_request_queue_duration_seconds_bucket", "outcome"}: metrics.FlowOutcomes,
	{"inference_extension_scheduler_attempts_total", "status"}:                            {metrics.SchedulerStatusSuccess, metrics.SchedulerStatusFailure},
	{"switchyard_config_reloads_total", "result"}:                                         {"success", "failure"},
}

// seriesLabels returns the labels a series named n carries (target labels
// aside): a declared metric's variable labels, le on a declared
// histogram's _bucket, quantile on a summary; ok is false for a name
// nothing declares. _bucket, _sum and _count are only stripped from
// declared histograms and summaries.
func seriesLabels(decl map[string]*declared, n string) ([]string, bool) {
	if d, ok := decl[n]; ok {
		if d.kind == kindSummary {
			return append(slices.Clone(d.labels), "quantile"), true
		}
		return d.labels, true
	}
	if _, ok := prometheusSeries[n]; ok {
		return nil, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(n, suf)
		if !found {
			continue
		}
		d, ok := decl[base]
		switch {
		case !ok:
		case d.kind == kindHistogram && suf == "_bucket":
			return append(slices.Clone(d.labels), "le"), true
		case (d.kind == kindHistogram || d.kind == kindSummary) && suf != "_bucket":
			return d.labels, true
		}
	}
	return nil, false
}

var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

// labelErrors returns what is wrong with the labels expr uses: a matcher,
// grouping (by/without) or vector-matching (on/ignoring) label that no
// series it selects carries, and a matcher value outside a closed set.
func labelErrors(decl map[string]*declared, expr string) []string {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var errs []string
	// carried returns the labels of every series selected under n.
	carried := func(n parser.Node) map[string]bool {
		out := map[string]bool{}
		for _, l := range targetLabels {
			out[l] = true
		}
		parser.Inspect(n, func(c parser.Node, _ []parser.Node) error {
			if vs, ok := c.(*parser.VectorSelector); ok {
				ls, _ := seriesLabels(decl, vs.Name)
				for _, l := range ls {
					out[l] = true
				}
			}
			return nil
		})
		return out
	}
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch x := n.(type) {
		case *parser.VectorSelector:
			ls, ok := seriesLabels(decl, x.Name)
			if !ok {
				errs = append(errs, "metric "+x.Name+" is not declared")
				return nil
			}
			for _, m := range x.LabelMatchers {
				if m.Name == labels.MetricName {
					continue
				}
				if !slices.Contains(ls, m.Name) && !slices.Contains(targetLabels, m.Name) {
					errs = append(errs, "matcher label "+m.Name+" is not a label of "+x.Name)
					continue
				}
				allowed, closed := closedValues[[2]string{x.Name, m.Name}]
				if !closed {
					continue
				}
				var values []string
				switch m.Type {
				case labels.MatchEqual, labels.MatchNotEqual:
					values = []string{m.Value}
				case labels.MatchRegexp, labels.MatchNotRegexp:
					if !literalAlternation.MatchString(m.Value) {
						errs = append(errs, "matcher "+m.String()+" of "+x.Name+": a closed label wants literal values")
						continue
					}
					values = strings.Split(m.Value, "|")
				}
				for _, v := range values {
					if !slices.Contains(allowed, v) {
						errs = append(errs, "matcher "+m.String()+" of "+x.Name+": "+v+" is not one of "+strings.Join(allowed, ", "))
					}
				}
			}
		case *parser.AggregateExpr:
			have := carried(x.Expr)
			for _, l := range x.Grouping {
				if !have[l] {
					errs = append(errs, "grouping label "+l+" is carried by no series of "+x.Expr.String())
				}
			}
		case *parser.BinaryExpr:
			if x.VectorMatching == nil {
				return nil
			}
			have := carried(x)
			for _, l := range x.VectorMatching.MatchingLabels {
				if !have[l] {
					errs = append(errs, "matching label "+l+" is carried by no series of "+x.String())
				}
			}
		}
		return nil
	})
	return errs
}

// TestExpressionLabelsDeclared checks every label every dashboard and
// alert expression matches, groups or joins on against the labels the
// metrics are declared with, and matcher values against closed sets.
func TestExpressionLabelsDeclared(t *testing.T) {
	decl := declaredMetrics(t)
	for _, e := range allExprs(t) {
		for _, msg := range labelErrors(decl, e.expr) {
			t.Errorf("%s: %s\n%s", e.where, msg, e.expr)
		}
	}
}

// TestLabelErrors shows the check catches a typo'd label or value.
func TestLabelErrors(t *testing.T) {
	decl := declaredMetrics(t)
	for _, tc := range []struct {
		name, expr string
		wantErr    string
	}{
		{"good grouping", `sum by (state) (switchyard_endpoints)`, ""},
		{"target label", `max by (namespace, job, pod) (switchyard_endpoints)`, ""},
		{"histogram le", `histogram_quantile(0.99, sum by (le) (rate(inference_objective_request_duration_seconds_bucket[5m])))`, ""},
		{"typo in grouping", `sum by (stat) (switchyard_endpoints)`, "grouping label stat"},
		{"typo in matcher", `switchyard_endpoints{sate="routable"}`, "matcher label sate"},
		{"typo in closed value", `switchyard_endpoints{state="routeable"}`, "routeable is not one of"},
		{"typo in regex value", `switchyard_request_refusals_total{reason=~"bad_request|body_to_large"}`, "body_to_large is not one of"},
		{"typo in on()", `switchyard_endpoints / on (stat) switchyard_endpoints_stale`, "matching label stat"},
		{"le on a gauge", `sum by (le) (switchyard_endpoints)`, "grouping label le"},
		{"_bucket of a counter", `switchyard_request_refusals_total_bucket`, "not declared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := strings.Join(labelErrors(decl, tc.expr), "\n")
			if tc.wantErr == "" && errs != "" {
				t.Errorf("unexpected errors: %s", errs)
			}
			if tc.wantErr != "" && !strings.Contains(errs, tc.wantErr) {
				t.Errorf("errors %q, want one containing %q", errs, tc.wantErr)
			}
		})
	}
}

// poolGauges are pool-level gauges every EPP replica exports for the same
// pool (leader election keeps each replica's datastore warm, and the
// operator scrapes replicas that are not Ready): summed over replicas they
// count the pool once per replica.
var poolGauges = map[string]bool{
	"inference_pool_ready_pods":         true,
	"switchyard_endpoints":              true,
	"switchyard_endpoints_stale":        true,
	"switchyard_endpoints_load_unknown": true,
}

// replicaErrors returns the pool gauges of expr that are summed over EPP
// replicas: the innermost aggregation that does not keep the replica
// (instance or pod) must be max, min or avg.
func replicaErrors(expr string) []string {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var errs []string
	parser.Inspect(node, func(n parser.Node, path []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok || !poolGauges[vs.Name] {
			return nil
		}
		for i := len(path) - 1; i >= 0; i-- {
			ag, ok := path[i].(*parser.AggregateExpr)
			if !ok {
				continue
			}
			if !ag.Without && (slices.Contains(ag.Grouping, "instance") || slices.Contains(ag.Grouping, "pod")) {
				continue
			}
			switch ag.Op {
			case parser.MAX, parser.MIN, parser.AVG:
			default:
				errs = append(errs, vs.Name+" is aggregated over EPP replicas with "+ag.Op.String()+", want max")
			}
			return nil
		}
		return nil
	})
	return errs
}

// TestPoolGaugesNotSummedOverReplicas checks every dashboard and alert
// expression takes max, not sum, of a pool gauge over EPP replicas.
func TestPoolGaugesNotSummedOverReplicas(t *testing.T) {
	for _, e := range allExprs(t) {
		for _, msg := range replicaErrors(e.expr) {
			t.Errorf("%s: %s\n%s", e.where, msg, e.expr)
		}
	}
	for _, tc := range []struct {
		expr string
		bad  bool
	}{
		{`sum by (state) (switchyard_endpoints)`, true},
		{`sum by (state) (max by (job, state) (switchyard_endpoints))`, false},
		{`max by (job) (sum by (job, instance) (switchyard_endpoints{state="routable"}))`, false},
		{`sum(inference_pool_ready_pods)`, true},
		{`sum(rate(switchyard_request_refusals_total[5m]))`, false},
	} {
		if got := len(replicaErrors(tc.expr)) > 0; got != tc.bad {
			t.Errorf("replicaErrors(%s): flagged %v, want %v", tc.expr, got, tc.bad)
		}
	}
}
