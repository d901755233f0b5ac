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

// TargetJobs is the regex of the scrape jobs SwitchyardTargetDown watches:
// the job names the overlay's ServiceMonitors produce (the Prometheus
// Operator names a job after the Service: switchyard for the EPP,
// switchyard-site-relay for the site-relay). Change it with the Services.
const TargetJobs = "switchyard|switchyard-site-relay"

// preParseReasons are the refusal reasons counted before the body is
// parsed, so before inference_objective_request_total counts the request:
// the refusal ratio adds them to its denominator.
const preParseReasons = "bad_request|protocol_error|body_timeout|body_too_large|buffer_budget_exhausted"

// NoRoutableEndpointsExpr is 0 per EPP job while no endpoint is routable or
// half-open. switchyard_endpoints reports every rotation state, with 0 for
// an empty one, so the sum is 0 (not absent) when all are out of rotation;
// max over the job's replicas, each of which keeps its own datastore.
const NoRoutableEndpointsExpr = `max by (namespace, job) (sum by (namespace, job, instance) (switchyard_endpoints{state=~"routable|half_open"})) == 0`

// requestsIn is the rate of requests an EPP job received: those the body
// parser counted, plus the refusals before it.
const requestsIn = `(sum by (namespace, job) (rate(inference_objective_request_total[5m])) + (sum by (namespace, job) (rate(switchyard_request_refusals_total{reason=~"` + preParseReasons + `"}[5m])) or sum by (namespace, job) (rate(inference_objective_request_total[5m])) * 0))`

// RefusalRatioExpr is the share of an EPP job's requests it refused in 5
// minutes, at most 1 (a bodiless request refused with no_endpoints is
// counted by neither), where the job received at least 0.1 requests/s.
const RefusalRatioExpr = `clamp_max(sum by (namespace, job) (rate(switchyard_request_refusals_total[5m])) / ` + requestsIn + `, 1) and on (namespace, job) ` + requestsIn + ` > 0.1`

// RuleGroups returns the alerting rules, in a fixed order. Thresholds are
// chosen for a pool that serves steady traffic; tune them in the generated
// PrometheusRule (or here, then regenerate) for yours.
func RuleGroups() []RuleGroup {
	return []RuleGroup{
		{Name: "switchyard-epp", Rules: []Alert{
			alert("SwitchyardNoReadyEndpoints",
				NoRoutableEndpointsExpr,
				"1m", critical,
				"EPP {{ $labels.job }} has no endpoint in rotation",
				"No endpoint of the pool of the EPP {{ $labels.job }} in {{ $labels.namespace }} is routable or half-open: each is stale, unhealthy (active health check) or its circuit breaker is open, "+
					"or the pool has no endpoint at all, so the EPP refuses requests with 503 no_endpoints. "+
					"Check that the model-server pods of the pool run and are Ready and answer their health and metrics ports "+
					"(switchyard_scrape_errors_total by reason, switchyard_health_check_transitions_total), and /debug/endpoints on the EPP's metrics port for each endpoint's state."),
			alert("SwitchyardRefusalRatioHigh",
				RefusalRatioExpr+` > 0.05`,
				"10m", warning,
				"EPP {{ $labels.job }} refuses {{ $value | humanizePercentage }} of requests",
				"More than 5% of the requests the EPP {{ $labels.job }} in {{ $labels.namespace }} received in 5 minutes (at least 0.1 requests/s) were answered by the EPP itself instead of routed. "+
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
			alert("SwitchyardTargetDown",
				`max by (namespace, job) (up{job=~"`+TargetJobs+`"}) == 0`,
				"2m", critical,
				"Prometheus cannot scrape {{ $labels.job }}",
				"Every target of the job {{ $labels.job }} in {{ $labels.namespace }} (the EPP or the site-relay) has failed its scrape for 2 minutes: the process is down, not Ready, "+
					"or its metrics port refuses the scrape (for the EPP, check the metrics token). While it lasts no other Switchyard alert of that job can fire. "+
					"Check the pods of the job, their events and logs, and the ServiceMonitor's port."),
		}},
		{Name: "switchyard-multisite", Rules: []Alert{
			alert("SwitchyardRelayPollFailing",
				`time() - max by (namespace, job) (grid_signals_last_success_timestamp_seconds > 0) > 30 or max by (namespace, job) (grid_signals_last_success_timestamp_seconds) == 0`,
				"1m", critical,
				"EPP {{ $labels.job }} has not heard its site-relay for 30 s or more (or never)",
				"The EPP {{ $labels.job }} in {{ $labels.namespace }} has had no ok poll of its site-relay for over 30 s, so its view of the other sites' load ages. "+
					"grid_signals_poll_total by result says why (unreachable, unauthorized, bad_identity, too_large, no_date); check the relay's pod, its Service, "+
					"and the signals client certificate and expected identity (--signals-relay-identity)."),
			alert("SwitchyardSiteSilent",
				`time() - max by (namespace, peer) (grid_peer_poll_last_success_timestamp_seconds > 0) > 60 or max by (namespace, peer) (grid_peer_poll_last_success_timestamp_seconds) == 0`,
				"2m", warning,
				"Site {{ $labels.peer }} has not answered the site-relay for a minute or more (or never)",
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
