package build

import (
	"bytes"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Alert is one alerting rule of the PrometheusRule.
type Alert struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// RuleGroup is a group of alerting rules, as Prometheus and promtool read it.
type RuleGroup struct {
	Name  string  `json:"name"`
	Rules []Alert `json:"rules"`
}

// Severities.
const (
	critical = "critical"
	warning  = "warning"
)

func alert(name, expr, forDur, severity, summary, description string) Alert {
	return Alert{
		Alert: name, Expr: expr, For: forDur,
		Labels:      map[string]string{"severity": severity},
		Annotations: map[string]string{"summary": summary, "description": description},
	}
}

// RuleGroups returns the alerting rules, in a fixed order. Thresholds are
// chosen for a pool that serves steady traffic; tune them in the generated
// PrometheusRule (or here, then regenerate) for yours.
func RuleGroups() []RuleGroup {
	return []RuleGroup{
		{Name: "switchyard-epp", Rules: []Alert{
			alert("SwitchyardNoReadyEndpoints",
				`sum by (namespace, job, name) (inference_pool_ready_pods) == 0`,
				"1m", critical,
				"InferencePool {{ $labels.name }} has no ready endpoint",
				"The EPP {{ $labels.job }} in {{ $labels.namespace }} has no endpoint with fresh metrics, so it refuses every request (503). "+
					"Check that the model-server pods of the pool run and are Ready, that their metrics port answers the EPP's scrape "+
					"(switchyard_scrape_errors_total by reason), and /debug/endpoints on the EPP's metrics port for each endpoint's state."),
			alert("SwitchyardRefusalRatioHigh",
				`sum by (namespace, job) (rate(switchyard_request_refusals_total[5m])) / sum by (namespace, job) (rate(inference_objective_request_total[5m])) > 0.05`,
				"10m", warning,
				"EPP {{ $labels.job }} refuses {{ $value | humanizePercentage }} of requests",
				"More than 5% of the requests the EPP {{ $labels.job }} in {{ $labels.namespace }} received in 5 minutes were answered by the EPP itself instead of routed. "+
					"The reason label of switchyard_request_refusals_total says why (no endpoints, admission, flow control, bad request…); "+
					"open the \"Switchyard / Pool overview\" dashboard, panel \"Refusals by reason\", and /debug/decisions for single refusals."),
			alert("SwitchyardEndpointMetricsStale",
				`max by (namespace, job) (switchyard_endpoints_stale) > 0`,
				"2m", warning,
				"EPP {{ $labels.job }} decides on stale metrics of {{ $value }} endpoint(s)",
				"The EPP {{ $labels.job }} in {{ $labels.namespace }} could not scrape fresh metrics from some endpoints for 2 minutes, so it routes around them or on old load. "+
					"Check switchyard_scrape_errors_total by reason (timeout, connect, http_status, parse, missing_metrics) and the model servers' metrics port; "+
					"the \"Switchyard / Endpoints\" dashboard shows which endpoint is stale."),
			alert("SwitchyardConfigReloadFailing",
				`sum by (namespace, job) (increase(switchyard_config_reloads_total{result="failure"}[15m])) > 0 or sum by (namespace, job) (increase(switchyard_site_topology_reloads_total{result="failure"}[15m])) > 0`,
				"1m", warning,
				"EPP {{ $labels.job }} refused a configuration or site topology change",
				"The EPP {{ $labels.job }} in {{ $labels.namespace }} failed to load its configuration file or site topology in the last 15 minutes and keeps serving with the last good one. "+
					"The EPP logs the field path of the error; validate the file with `epp validate FILE` and fix the ConfigMap."),
			alert("SwitchyardFlowControlQueueNearCapacity",
				`max by (namespace, job, limit) (switchyard_flow_control_queue_utilization) > 0.9`,
				"5m", warning,
				"Flow-control queue of EPP {{ $labels.job }} is {{ $value | humanizePercentage }} full ({{ $labels.limit }})",
				"Queued requests (limit=requests) or bytes (limit=bytes) of the EPP {{ $labels.job }} in {{ $labels.namespace }} are above 90% of flowControl.maxRequests or maxBytes; "+
					"new requests will be rejected with queue_full. Add endpoints, raise the limit, or check why dispatch stalls (pool saturation on the \"Switchyard / Flow control\" dashboard)."),
		}},
		{Name: "switchyard-multisite", Rules: []Alert{
			alert("SwitchyardRelayPollFailing",
				`time() - max by (namespace, job) (grid_signals_last_success_timestamp_seconds) > 30`,
				"1m", critical,
				"EPP {{ $labels.job }} has not heard its site-relay for {{ $value | humanizeDuration }}",
				"The EPP {{ $labels.job }} in {{ $labels.namespace }} has had no ok poll of its site-relay for over 30 s, so its view of the other sites' load ages. "+
					"grid_signals_poll_total by result says why (unreachable, unauthorized, bad_identity, too_large, no_date); check the relay's pod, its Service, "+
					"and the signals client certificate and expected identity (--signals-relay-identity)."),
			alert("SwitchyardSiteSilent",
				`time() - max by (namespace, peer) (grid_peer_poll_last_success_timestamp_seconds) > 60`,
				"2m", warning,
				"Site {{ $labels.peer }} has not answered the site-relay for {{ $value | humanizeDuration }}",
				"The site-relay in {{ $labels.namespace }} has had no ok poll of the peer relay of site {{ $labels.peer }} for over a minute, so that site's load is unknown and it is drawn with its last weight or the explore floor. "+
					"grid_peer_poll_total by outcome says why; check the peer's relay, the network path between sites and the mutual-TLS certificates."),
			alert("SwitchyardModelShedding",
				`max by (namespace, job, model) (grid_route_shedding) == 1`,
				"5m", warning,
				"Model {{ $labels.model }} is shed by EPP {{ $labels.job }}",
				"The site stage of the EPP {{ $labels.job }} in {{ $labels.namespace }} refuses requests for model {{ $labels.model }} (reason shed) because every site serving it is above its ceiling. "+
					"See \"Site rho\" and \"Site ceilings\" on the \"Switchyard / Multi-site\" dashboard; add capacity or lower the traffic."),
		}},
	}
}

// header is written above the generated PrometheusRule.
const header = `# Generated by manifests/dashboards/gen (go generate ./manifests/dashboards):
# edit manifests/dashboards/internal/build/alerts.go, not this file.
`

// PrometheusRule returns the alerting rules as a monitoring.coreos.com/v1
// PrometheusRule manifest.
func PrometheusRule() ([]byte, error) {
	obj := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name": "switchyard",
			"labels": map[string]string{
				"app.kubernetes.io/name":      "switchyard",
				"app.kubernetes.io/component": "monitoring",
			},
		},
		"spec": map[string]any{"groups": RuleGroups()},
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("prometheusrule: %w", err)
	}
	var buf bytes.Buffer
	buf.WriteString(header)
	buf.Write(b)
	return buf.Bytes(), nil
}
