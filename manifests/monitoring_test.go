package manifests_test

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const monitoringGroup = "monitoring.coreos.com"

// checkMonitoring checks the monitoring overlay's objects in Go, since the
// test API server has no Prometheus Operator CRDs: each ServiceMonitor
// selects a rendered Service by its labels and names one of its ports, the
// EPP's sends the metrics token of a rendered Secret, the PrometheusRule
// has complete rules, and every dashboard ConfigMap carries the sidecar's
// label and one dashboard JSON. Other kustomizations ship none of these.
func checkMonitoring(t *testing.T, objs objects, want expectation) {
	t.Helper()
	var dashboards []*unstructured.Unstructured
	for _, cm := range objs.ofKind("", "ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] == "1" {
			dashboards = append(dashboards, cm)
		}
	}
	sms := objs.ofKind(monitoringGroup, "ServiceMonitor")
	pms := objs.ofKind(monitoringGroup, "PodMonitor")
	rules := objs.ofKind(monitoringGroup, "PrometheusRule")
	if !want.monitoring {
		if len(sms)+len(pms)+len(rules)+len(dashboards) != 0 {
			t.Errorf("%d ServiceMonitors, %d PodMonitors, %d PrometheusRules, %d dashboard ConfigMaps outside the monitoring overlay", len(sms), len(pms), len(rules), len(dashboards))
		}
		return
	}
	checkModelServerMonitor(t, objs, pms)
	wantPorts := map[string]string{"switchyard-epp": "http-metrics", "switchyard-site-relay": "http-admin"}
	if len(sms) != len(wantPorts) {
		t.Errorf("%d ServiceMonitors, want %d", len(sms), len(wantPorts))
	}
	for _, sm := range sms {
		port, ok := wantPorts[sm.GetName()]
		if !ok {
			t.Errorf("%s: unexpected", describe(sm))
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		if len(sel) == 0 {
			t.Errorf("%s: spec.selector.matchLabels is empty", describe(sm))
		}
		var matched []*unstructured.Unstructured
		for _, svc := range objs.ofKind("", "Service") {
			if labelsMatch(svc.GetLabels(), sel) {
				matched = append(matched, svc)
			}
		}
		if len(matched) != 1 {
			t.Errorf("%s: spec.selector.matchLabels %v selects %d Services, want 1", describe(sm), sel, len(matched))
			continue
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Errorf("%s: spec.endpoints has %d entries, want 1", describe(sm), len(eps))
			continue
		}
		ep := eps[0].(map[string]any)
		if ep["port"] != port || ep["path"] != "/metrics" {
			t.Errorf("%s: spec.endpoints[0] port %v path %v, want %s /metrics", describe(sm), ep["port"], ep["path"], port)
		}
		if !servicePort(matched[0], port) {
			t.Errorf("%s: spec.endpoints[0].port %s is not a port of %s", describe(sm), port, describe(matched[0]))
		}
		if sm.GetName() != "switchyard-epp" {
			continue
		}
		// The EPP's metrics port wants the bearer token the EPP reads
		// with --metrics-token-file.
		name, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
		key, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "key")
		typ, _, _ := unstructured.NestedString(ep, "authorization", "type")
		sec := objs.get("", "Secret", name)
		if typ != "Bearer" || sec == nil {
			t.Errorf("%s: spec.endpoints[0].authorization: want a Bearer credential from a rendered Secret, got type %q secret %q", describe(sm), typ, name)
		} else if data, _ := sec.Object["data"].(map[string]any); data[key] == nil {
			t.Errorf("%s: spec.endpoints[0].authorization.credentials.key %q is not in %s", describe(sm), key, describe(sec))
		}
		// Its per-endpoint series' label endpoint must survive the
		// operator's target label of the same name.
		if hl, _, _ := unstructured.NestedBool(ep, "honorLabels"); !hl {
			t.Errorf("%s: spec.endpoints[0].honorLabels: want true (the EPP's label endpoint)", describe(sm))
		}
		dep := objs.get("apps", "Deployment", "switchyard")
		if dep == nil || !strings.Contains(strings.Join(containerArgs(dep), " "), "--metrics-token-file=") {
			t.Errorf("%s: the EPP does not read the metrics token (--metrics-token-file)", describe(sm))
		}
	}
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(rules))
	}
	groups, _, _ := unstructured.NestedSlice(rules[0].Object, "spec", "groups")
	n := 0
	for gi, g := range groups {
		rs, _ := g.(map[string]any)["rules"].([]any)
		for ri, r := range rs {
			n++
			rm := r.(map[string]any)
			sev, _, _ := unstructured.NestedString(rm, "labels", "severity")
			summary, _, _ := unstructured.NestedString(rm, "annotations", "summary")
			desc, _, _ := unstructured.NestedString(rm, "annotations", "description")
			if rm["alert"] == "" || rm["expr"] == "" || rm["for"] == "" || sev == "" || summary == "" || desc == "" {
				t.Errorf("%s: spec.groups[%d].rules[%d]: alert, expr, for, labels.severity, annotations.summary and description are required", describe(rules[0]), gi, ri)
			}
		}
	}
	if n < 8 {
		t.Errorf("%s: %d rules, want at least 8", describe(rules[0]), n)
	}
	if len(dashboards) != 5 {
		t.Errorf("%d dashboard ConfigMaps, want 5", len(dashboards))
	}
	for _, cm := range dashboards {
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		if len(data) != 1 {
			t.Errorf("%s: %d data keys, want 1", describe(cm), len(data))
		}
		for k, v := range data {
			var d struct {
				UID    string            `json:"uid"`
				Panels []json.RawMessage `json:"panels"`
			}
			if !strings.HasSuffix(k, ".json") || json.Unmarshal([]byte(v), &d) != nil || d.UID == "" || len(d.Panels) == 0 {
				t.Errorf("%s: data.%s is not a dashboard JSON with a uid and panels", describe(cm), k)
			}
		}
	}
}

// checkModelServerMonitor checks that one PodMonitor scrapes the pods and
// port of every rendered InferencePool (the vllm:* series the dashboards
// chart).
func checkModelServerMonitor(t *testing.T, objs objects, pms []*unstructured.Unstructured) {
	t.Helper()
	if len(pms) != 1 {
		t.Errorf("%d PodMonitors, want 1 (the model servers)", len(pms))
		return
	}
	pm := pms[0]
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	pools := objs.ofKind("inference.networking.k8s.io", "InferencePool")
	if len(pools) == 0 {
		t.Errorf("%s: no InferencePool rendered", describe(pm))
	}
	for _, pool := range pools {
		poolSel, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "selector", "matchLabels")
		if !labelsMatch(poolSel, sel) || len(poolSel) != len(sel) {
			t.Errorf("%s: spec.selector.matchLabels %v, want the selector %v of %s", describe(pm), sel, poolSel, describe(pool))
		}
		ports, _, _ := unstructured.NestedSlice(pool.Object, "spec", "targetPorts")
		if len(eps) != 1 || len(ports) == 0 {
			t.Errorf("%s: spec.podMetricsEndpoints has %d entries, want 1 for the %d target ports of %s", describe(pm), len(eps), len(ports), describe(pool))
			continue
		}
		ep, _ := eps[0].(map[string]any)
		want, _, _ := unstructured.NestedInt64(ports[0].(map[string]any), "number")
		got, _, _ := unstructured.NestedInt64(ep, "portNumber")
		if got != want || ep["path"] != "/metrics" {
			t.Errorf("%s: spec.podMetricsEndpoints[0] portNumber %d path %v, want %d /metrics (%s)", describe(pm), got, ep["path"], want, describe(pool))
		}
	}
}

func labelsMatch(have, sel map[string]string) bool {
	for k, v := range sel {
		if have[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func servicePort(svc *unstructured.Unstructured, name string) bool {
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	for _, p := range ports {
		if p.(map[string]any)["name"] == name {
			return true
		}
	}
	return false
}

func containerArgs(dep *unstructured.Unstructured) []string {
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	var out []string
	for _, c := range cs {
		args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
		out = append(out, args...)
	}
	return out
}
