package dashboards

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/switchyard-ai/switchyard/manifests/dashboards/internal/build"
)

// TestPromtoolRuleUnits runs promtool test rules on the PrometheusRule's
// expressions (annotations dropped: the unit tests check when an alert
// fires and with which labels) with series that reproduce the faults the
// alerts exist for. promtool comes with the Debian package prometheus; as
// TestPromtoolCheckRules, it skips without it unless
// SWITCHYARD_REQUIRE_PROMETHEUS=1.
func TestPromtoolRuleUnits(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("promtool not on PATH and SWITCHYARD_REQUIRE_PROMETHEUS=1: %v", err)
		}
		t.Skip("promtool not on PATH (Debian package prometheus)")
	}
	groups := build.RuleGroups()
	for gi := range groups {
		for ri := range groups[gi].Rules {
			groups[gi].Rules[ri].Annotations = nil
		}
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	type series struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	type alert struct {
		ExpLabels map[string]string `json:"exp_labels"`
	}
	type alertTest struct {
		EvalTime  string  `json:"eval_time"`
		Alertname string  `json:"alertname"`
		ExpAlerts []alert `json:"exp_alerts"`
	}
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr       string   `json:"expr"`
		EvalTime   string   `json:"eval_time"`
		ExpSamples []sample `json:"exp_samples"`
	}
	type test struct {
		Name           string      `json:"name"`
		Interval       string      `json:"interval"`
		InputSeries    []series    `json:"input_series"`
		AlertRuleTests []alertTest `json:"alert_rule_test,omitempty"`
		ExprTests      []exprTest  `json:"promql_expr_test,omitempty"`
	}
	fires := func(name, at string, labels ...map[string]string) alertTest {
		at2 := alertTest{EvalTime: at, Alertname: name, ExpAlerts: []alert{}}
		for _, l := range labels {
			l["alertname"] = name
			at2.ExpAlerts = append(at2.ExpAlerts, alert{ExpLabels: l})
		}
		return at2
	}
	eps := func(inst, state, values string) series {
		return series{`switchyard_endpoints{namespace="ns",job="switchyard",instance="` + inst + `",state="` + state + `"}`, values}
	}
	tests := []test{{
		// Every endpoint out of rotation (health checks failed) on both
		// replicas: no_endpoints for every request, the alert fires.
		Name: "no endpoint in rotation", Interval: "1m",
		InputSeries: []series{
			eps("a", "routable", "0x10"), eps("a", "half_open", "0x10"), eps("a", "unhealthy", "2x10"),
			eps("b", "routable", "0x10"), eps("b", "half_open", "0x10"), eps("b", "breaker_open", "2x10"),
		},
		AlertRuleTests: []alertTest{fires("SwitchyardNoReadyEndpoints", "5m", map[string]string{"severity": "critical", "namespace": "ns", "job": "switchyard"})},
	}, {
		// Stale metrics fail open (endpoints stay routable) and a
		// replica has not synced yet: no alert.
		Name: "routable on one replica, all stale", Interval: "1m",
		InputSeries: []series{
			eps("a", "routable", "2x10"), eps("a", "half_open", "0x10"),
			eps("b", "routable", "0x10"), eps("b", "half_open", "0x10"),
			{`inference_pool_ready_pods{namespace="ns",job="switchyard",instance="a",name="pool"}`, "0x10"},
		},
		AlertRuleTests: []alertTest{fires("SwitchyardNoReadyEndpoints", "5m")},
	}, {
		// Every request refused before its body was parsed: the ratio is
		// 1, not +Inf, and the alert fires.
		Name: "refusals before the body parse", Interval: "1m",
		InputSeries: []series{
			{`inference_objective_request_total{namespace="ns",job="switchyard",instance="a",model_name="m"}`, "0x20"},
			{`switchyard_request_refusals_total{namespace="ns",job="switchyard",instance="a",reason="bad_request"}`, "0+60x20"},
		},
		AlertRuleTests: []alertTest{fires("SwitchyardRefusalRatioHigh", "15m", map[string]string{"severity": "warning", "namespace": "ns", "job": "switchyard"})},
		ExprTests:      []exprTest{{Expr: build.RefusalRatioExpr, EvalTime: "15m", ExpSamples: []sample{{Labels: `{namespace="ns",job="switchyard"}`, Value: 1}}}},
	}, {
		// Half the parsed requests refused, plus as many refused before
		// the parse: 2 of 3.
		Name: "refusal share counts early refusals", Interval: "1m",
		InputSeries: []series{
			{`inference_objective_request_total{namespace="ns",job="switchyard",instance="a",model_name="m"}`, "0+120x20"},
			{`switchyard_request_refusals_total{namespace="ns",job="switchyard",instance="a",reason="no_endpoints"}`, "0+60x20"},
			{`switchyard_request_refusals_total{namespace="ns",job="switchyard",instance="a",reason="body_too_large"}`, "0+60x20"},
		},
		ExprTests: []exprTest{{Expr: build.RefusalRatioExpr, EvalTime: "15m", ExpSamples: []sample{{Labels: `{namespace="ns",job="switchyard"}`, Value: 2.0 / 3}}}},
	}, {
		// Three refusals a minute: under 0.1 requests/s, no alert.
		Name: "too little traffic", Interval: "1m",
		InputSeries: []series{
			{`inference_objective_request_total{namespace="ns",job="switchyard",instance="a",model_name="m"}`, "0+3x20"},
			{`switchyard_request_refusals_total{namespace="ns",job="switchyard",instance="a",reason="no_endpoints"}`, "0+3x20"},
		},
		AlertRuleTests: []alertTest{fires("SwitchyardRefusalRatioHigh", "15m")},
	}, {
		Name: "site-relay down", Interval: "1m",
		InputSeries: []series{
			{`up{namespace="ns",job="switchyard-site-relay",instance="r"}`, "0x10"},
			{`up{namespace="ns",job="switchyard",instance="a"}`, "1x10"},
			{`up{namespace="ns",job="model-servers",instance="m"}`, "0x10"},
		},
		AlertRuleTests: []alertTest{fires("SwitchyardTargetDown", "5m", map[string]string{"severity": "critical", "namespace": "ns", "job": "switchyard-site-relay"})},
	}, {
		// Never an ok poll: the gauge is 0, the alert fires (and is not
		// computed from the Unix epoch).
		Name: "relay never polled", Interval: "1m",
		InputSeries: []series{
			{`grid_signals_last_success_timestamp_seconds{namespace="ns",job="switchyard",instance="a"}`, "0x10"},
		},
		AlertRuleTests: []alertTest{fires("SwitchyardRelayPollFailing", "5m", map[string]string{"severity": "critical", "namespace": "ns", "job": "switchyard"})},
	}}
	body, err := yaml.Marshal(map[string]any{"rule_files": []string{"rules.yaml"}, "evaluation_interval": "1m", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "rules_test.yaml")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), promtool, "test", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules did not report SUCCESS:\n%s", out)
	}
}
