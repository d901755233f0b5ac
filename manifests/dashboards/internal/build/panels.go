package build

import (
	"fmt"
	"strconv"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// sel returns a selector with extra matchers after the dashboard's.
func sel(base string, extra ...string) string {
	s := "{" + base
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

func rateOf(metric, selector string) string {
	return "rate(" + metric + selector + "[" + rate + "])"
}

func quantile(q, metric, selector, by string) string {
	return "histogram_quantile(" + q + ", sum by (" + by + ") (" + rateOf(metric+"_bucket", selector) + "))"
}

// refusedShare is the share of requests refused in 5 minutes: refusals over
// requests received, those refused before the body parser counted them
// (preParseReasons) added, at most 1.
func refusedShare(e string) string {
	refused := "sum(rate(switchyard_request_refusals_total" + e + "[5m]))"
	received := "sum(rate(inference_objective_request_total" + e + "[5m]))"
	early := "sum(rate(switchyard_request_refusals_total" + sel(epp, `reason=~"`+preParseReasons+`"`) + "[5m]))"
	return "clamp_max(" + refused + " / ((" + received + " or vector(0)) + (" + early + " or vector(0))), 1)"
}

// Rotation states as the state timeline draws them: each state's value
// and colour.
var rotationStates = []struct {
	state, color string
}{
	{"routable", "green"}, {"half_open", "yellow"}, {"stale", "orange"}, {"unhealthy", "red"}, {"breaker_open", "purple"},
}

// rotationStateExpr gives one series per endpoint whose value is its
// rotation state's index in rotationStates.
func rotationStateExpr(e string) string {
	s := "max by (endpoint) ("
	for i, st := range rotationStates {
		if i > 0 {
			s += " or "
		}
		s += fmt.Sprintf("switchyard_endpoint_health%s * %d", sel(epp, `state="`+st.state+`"`), i)
	}
	return s + ")"
}

func rotationMappings() []dashboard.ValueMapping {
	opts := map[string]dashboard.ValueMappingResult{}
	for i, st := range rotationStates {
		opts[strconv.Itoa(i)] = dashboard.ValueMappingResult{Text: cog.ToPtr(st.state), Color: cog.ToPtr(st.color), Index: cog.ToPtr(int32(i))}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: opts}}}
}

// sheddingMappings: grid_route_shedding is 0 or 1, grid_route_gateway_up
// plus 2 is 2 (down) or 3 (up).
func sheddingMappings() []dashboard.ValueMapping {
	opts := map[string]dashboard.ValueMappingResult{}
	for i, m := range []struct{ text, color string }{{"serving", "green"}, {"shed", "red"}, {"down", "red"}, {"up", "green"}} {
		opts[strconv.Itoa(i)] = dashboard.ValueMappingResult{Text: cog.ToPtr(m.text), Color: cog.ToPtr(m.color), Index: cog.ToPtr(int32(i))}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: opts}}}
}

func poolOverview() spec {
	e := sel(epp)
	return spec{
		name:  "pool-overview",
		uid:   "switchyard-pool-overview",
		title: "Switchyard / Pool overview",
		desc:  "Where the pool's traffic goes and whether it is served: request outcomes, latency, ready endpoints, load and refusals.",
		job:   true,
		rows: []row{{panels: []panel{
			{kind: kindStat, width: 6, title: "Ready endpoints",
				desc:    "Can the pool serve at all? Endpoints in rotation (routable or half_open) per EPP job, the largest over its replicas; 0 means every request is refused with no_endpoints.",
				targets: []target{t("max by (job) (sum by (job, instance) (switchyard_endpoints"+sel(epp, `state=~"routable|half_open"`)+"))", "{{job}}")}},
			{kind: kindStat, width: 6, title: "Refused share (5m)", unit: "percentunit",
				desc:    "What fraction of requests does the EPP answer itself instead of routing? Refusals over requests received in the last 5 minutes, those refused before their body was parsed included; at most 100%.",
				targets: []target{t(refusedShare(e), "refused")}},
			{kind: kindTimeseries, width: 12, title: "Endpoints by rotation state",
				desc:    "Why is an endpoint not picked? Endpoints per rotation state: routable, half_open (breaker trial), stale (metrics not fresh), unhealthy (active health check), breaker_open.",
				targets: []target{t("sum by (state) (max by (job, state) (switchyard_endpoints"+e+"))", "{{state}}")}},
			ts("Requests by outcome", "Are requests scheduled? Requests received per model, scheduling attempts by status, and errors by GIE error code (the status the client got: BadRequest, NotFound, Internal…).", "reqps",
				t("sum by (model_name) ("+rateOf("inference_objective_request_total", e)+")", "received {{model_name}}"),
				t("sum by (status) ("+rateOf("inference_extension_scheduler_attempts_total", e)+")", "scheduled {{status}}"),
				t("sum by (error_code) ("+rateOf("inference_objective_request_error_total", e)+")", "error {{error_code}}")),
			ts("Refusals by reason", "Why were requests refused? Requests the EPP answered itself (400, 413, 429, 503…) per reason.", "reqps",
				t("sum by (reason) ("+rateOf("switchyard_request_refusals_total", e)+")", "{{reason}}")),
			ts("Request latency p50 / p99", "How long do requests take end to end (received to complete response)?", "s",
				t(quantile("0.5", "inference_objective_request_duration_seconds", e, "le"), "p50"),
				t(quantile("0.99", "inference_objective_request_duration_seconds", e, "le"), "p99")),
			ts("Scheduling latency p50 / p99", "How much does the EPP add? One scheduling cycle: admission, profiles and pick.", "s",
				t(quantile("0.5", "inference_extension_scheduler_e2e_duration_seconds", e, "le"), "p50"),
				t(quantile("0.99", "inference_extension_scheduler_e2e_duration_seconds", e, "le"), "p99")),
			ts("Average queue and running requests", "How loaded is the pool? Mean waiting queue and running requests over endpoints with fresh metrics.", "short",
				t("avg by (name) (inference_pool_average_queue_size"+e+")", "queue {{name}}"),
				t("avg by (name) (inference_pool_average_running_requests"+e+")", "running {{name}}")),
			{kind: kindTimeseries, width: 12, title: "Average KV-cache utilisation", unit: "percentunit", max: cog.ToPtr(1.0),
				desc:    "Is the pool running out of KV cache? Mean KV-cache utilisation over endpoints with fresh metrics.",
				targets: []target{t("avg by (name) (inference_pool_average_kv_cache_utilization"+e+")", "{{name}}")}},
		}}},
	}
}

func perEndpoint() spec {
	e := sel(epp)
	m := sel(ns)
	return spec{
		name:  "per-endpoint",
		uid:   "switchyard-per-endpoint",
		title: "Switchyard / Endpoints",
		desc:  "One line per endpoint: how often it is picked, its load as the model server reports it, and whether it is in rotation.",
		job:   true,
		rows: []row{{panels: []panel{
			ts("Picks per endpoint", "Where does traffic go? Successful scheduling attempts per primary endpoint picked.", "reqps",
				t("sum by (pod_name) ("+rateOf("inference_extension_scheduler_attempts_total", sel(epp, `status="success"`))+")", "{{pod_name}}")),
			ts("Waiting queue per endpoint", "Which endpoint is backed up? Waiting-queue length per endpoint as the EPP last scraped it (stale endpoints included).", "short",
				t("max by (model_server_pod) (inference_pool_per_pod_queue_size"+e+")", "{{model_server_pod}}")),
			ts("In-flight per endpoint", "How many requests does each model server run now? vllm:num_requests_running of the model servers (their own scrape).", "short",
				t("sum by (pod) (vllm:num_requests_running"+m+")", "{{pod}}")),
			{kind: kindTimeseries, width: 12, title: "KV-cache usage per endpoint", unit: "percentunit", max: cog.ToPtr(1.0),
				desc:    "Which endpoint is near its KV-cache limit? vllm:kv_cache_usage_perc of the model servers.",
				targets: []target{t("max by (pod) (vllm:kv_cache_usage_perc"+m+")", "{{pod}}")}},
			{kind: kindStateTimeline, width: 24, title: "Rotation state per endpoint",
				desc:     "Is an endpoint out of rotation, and why? One row per endpoint, coloured by its state: routable, half_open, stale (metrics not fresh), unhealthy (health checks) or breaker_open.",
				mappings: rotationMappings(),
				targets:  []target{t(rotationStateExpr(e), "{{endpoint}}")}},
			ts("Stale endpoints and scrape errors", "Is the EPP deciding on old data? Endpoints whose metrics are not fresh or whose load is unknown, and failed metrics scrapes by reason.", "short",
				t("sum(max by (job) (switchyard_endpoints_stale"+e+"))", "stale endpoints"),
				t("sum(max by (job) (switchyard_endpoints_load_unknown"+e+"))", "load unknown"),
				t("sum by (reason) ("+rateOf("switchyard_scrape_errors_total", e)+")", "scrape errors {{reason}}/s")),
			ts("Health and breaker transitions", "Are endpoints flapping? Circuit-breaker state changes and active health-check verdict changes.", "short",
				t("sum by (to) ("+rateOf("switchyard_circuit_breaker_transitions_total", e)+")", "breaker to {{to}}/s"),
				t("sum by (to) ("+rateOf("switchyard_health_check_transitions_total", e)+")", "health check to {{to}}/s")),
		}}},
	}
}

func pluginsStrategies() spec {
	e := sel(epp)
	m := sel(ns)
	return spec{
		name:  "plugins-strategies",
		uid:   "switchyard-plugins-strategies",
		title: "Switchyard / Plugins and strategies",
		desc:  "What each plugin costs and what decided each pick: scorers or the strategy, prefix-cache hits, engine-load, usage and quota reasons.",
		job:   true,
		rows: []row{{panels: []panel{
			ts("Plugin duration p99 by plugin", "Which plugin is slow? p99 time per plugin and extension point (inference_extension_plugin_duration_seconds).", "s",
				t(quantile("0.99", "inference_extension_plugin_duration_seconds", e, "le, extension_point, plugin_name"), "{{extension_point}} {{plugin_name}}")),
			{kind: kindTimeseries, width: 12, title: "Prefix-cache hit ratio", unit: "percentunit", max: cog.ToPtr(1.0),
				desc: "Does prefix-aware routing land prompts where their prefix is cached? The share of prefix blocks the EPP's index believed the chosen endpoint held, against the hits the model servers measured.",
				targets: []target{
					t("sum(rate(inference_extension_prefix_indexer_hit_ratio_sum"+e+"["+rate+"])) / sum(rate(inference_extension_prefix_indexer_hit_ratio_count"+e+"["+rate+"]))", "EPP index"),
					t("sum(rate(vllm:prefix_cache_hits_total"+m+"["+rate+"])) / sum(rate(vllm:prefix_cache_queries_total"+m+"["+rate+"]))", "model servers"),
				}},
			ts("Scorers vs strategy", "Who chose the endpoint: the profile's scorers (one endpoint scored clearly highest) or the selection strategy?", "reqps",
				t("sum by (picker, decided_by) ("+rateOf("switchyard_strategy_decisions_total", e)+")", "{{picker}} {{decided_by}}")),
			ts("Engine-load decisions by reason", "Why did the engine-load picker choose: lowest queue, stale fallback or hysteresis hold?", "reqps",
				t("sum by (reason) ("+rateOf("routing_engine_load_decisions_total", e)+")", "{{reason}}")),
			ts("Usage and quota decisions by reason", "Did provider usage weights and rate-limit quotas decide? usage-weight outcomes and what the chosen endpoint's quota snapshot gave.", "reqps",
				t("sum by (reason) ("+rateOf("routing_usage_weight_decisions_total", e)+")", "usage {{reason}}"),
				t("sum by (reason) ("+rateOf("routing_quota_aware_decisions_total", e)+")", "quota {{reason}}")),
		}}},
	}
}

func flowControl() spec {
	e := sel(epp)
	return spec{
		name:  "flow-control",
		uid:   "switchyard-flow-control",
		title: "Switchyard / Flow control",
		desc:  "GIE's Flow Control row on Switchyard's series: what waits, for how long, and what is turned away.",
		job:   true,
		rows: []row{{panels: []panel{
			ts("Queue size per priority", "How many requests wait, per priority band?", "short",
				t("sum by (priority) (inference_extension_flow_control_queue_size"+e+")", "priority {{priority}}")),
			ts("Queue bytes per priority", "How much memory do waiting requests hold against flowControl.maxBytes, per priority band?", "bytes",
				t("sum by (priority) (inference_extension_flow_control_queue_bytes"+e+")", "priority {{priority}}")),
			ts("Queue wait p99 per priority", "How long do dispatched requests wait before dispatch, per priority band (outcome Dispatched)?", "s",
				t(quantile("0.99", "inference_extension_flow_control_request_queue_duration_seconds", sel(epp, `outcome="Dispatched"`), "le, priority"), "priority {{priority}}")),
			ts("Outcomes by reason", "Why were requests turned away? Requests through flow control by outcome: dispatched, queue_full, saturated, ttl_expired, no_endpoints, cancelled.", "reqps",
				t("sum by (outcome) ("+rateOf("switchyard_flow_control_outcomes_total", e)+")", "{{outcome}}")),
			{kind: kindTimeseries, width: 24, title: "Queue utilisation and pool saturation", unit: "percentunit",
				desc: "Is the queue about to overflow? Queued requests and bytes over their limits, and the pool's saturation at the dispatcher's last look (1 = saturated: requests wait).",
				targets: []target{
					t("max by (limit) (switchyard_flow_control_queue_utilization"+e+")", "queue {{limit}}"),
					t("max by (inference_pool) (inference_extension_flow_control_pool_saturation"+e+")", "saturation {{inference_pool}}"),
				}},
		}}},
	}
}

func multiSite() spec {
	e := sel(epp)
	r := sel(ns)
	return spec{
		name:  "multi-site",
		uid:   "switchyard-multi-site",
		title: "Switchyard / Multi-site",
		desc:  "The site stage: each site's learned capacity and load, how requests were drawn between sites, shedding, and the signals the EPP and the site-relays exchange.",
		job:   true,
		rows: []row{
			{title: "Site stage (EPP)", panels: []panel{
				ts("Site ceilings", "How much can each site take? The learned ceiling, max(floor, min(soft, hard)), with its soft and hard bounds.", "short",
					t("max by (site, cluster) (grid_route_site_ceiling"+e+")", "ceiling {{site}}"),
					t("max by (site, cluster) (grid_route_site_ceiling_soft"+e+")", "soft {{site}}"),
					t("max by (site, cluster) (grid_route_site_ceiling_hard"+e+")", "hard {{site}}")),
				{kind: kindTimeseries, width: 12, title: "Site rho", unit: "percentunit",
					desc: "How full is each site? The combined rho, max(counted, reported): in-flight over ceiling, and the KV-cache utilisation the site reports.",
					targets: []target{
						t("max by (site, cluster) (grid_route_site_rho"+e+")", "rho {{site}}"),
						t("max by (site, cluster) (grid_route_site_rho_counted"+e+")", "counted {{site}}"),
						t("max by (site, cluster) (grid_route_site_rho_reported"+e+")", "reported {{site}}"),
					}},
				ts("Site draw weights", "With which weight is each site drawn? Its ceiling, lifted by the explore floor.", "short",
					t("max by (site, cluster) (grid_route_site_weight"+e+")", "{{site}}")),
				ts("Selections by path", "Which arm of the site draw did requests take (lone, between_two, two_choices, by_capacity, queue_tie, fallback)?", "reqps",
					t("sum by (path) ("+rateOf("grid_route_selections_total", e)+")", "{{path}}")),
				ts("Decisions by site and reason", "Where did requests go and why? Site decisions per site and reason; refusals (shed, no_route, model_not_found, no_model) have no site.", "reqps",
					t("sum by (site, reason) ("+rateOf("grid_route_decisions_total", e)+")", "{{site}} {{reason}}")),
				{kind: kindStateTimeline, width: 12, title: "Shedding and remote gateways",
					desc:     "Is a model shed, and can remote sites be reached? One row per model (serving or shed) and per remote site's gateway (up while it passes its health probes, else down).",
					mappings: sheddingMappings(),
					targets: []target{
						t("max by (model) (grid_route_shedding"+e+")", "model {{model}}"),
						t("max by (site) (grid_route_gateway_up"+e+") + 2", "gateway {{site}}"),
					}},
			}},
			{title: "Signals (EPP ← site-relay)", panels: []panel{
				ts("Relay polls by result", "Does the EPP hear its site-relay? Polls by result (ok, unreachable, unauthorized, too_large, no_date, bad_identity).", "reqps",
					t("sum by (result) ("+rateOf("grid_signals_poll_total", e)+")", "{{result}}")),
				{kind: kindTimeseries, width: 6, title: "Signals age", unit: "s",
					desc:    "How old is the load the EPP decides on? Seconds since the last ok poll of the site-relay.",
					targets: []target{t("time() - max(grid_signals_last_success_timestamp_seconds"+e+" > 0)", "since last ok poll")}},
				{kind: kindTimeseries, width: 6, title: "Signals size vs ceiling", unit: "percentunit",
					desc:    "Will the relay's response outgrow the EPP's 1 MiB read ceiling? The last ok response's size over 1 MiB.",
					targets: []target{t("max(grid_signals_response_bytes"+e+") / 1048576", "response / 1 MiB")}},
				ts("Ingest drops by reason", "Which rows of the signals were refused? EPP: skew, site_mismatch, cap, parse; relay: the same per peer.", "short",
					t("sum by (reason) ("+rateOf("grid_signals_ingest_dropped_total", e)+")", "EPP {{reason}}/s"),
					t("sum by (peer, reason) ("+rateOf("grid_peer_ingest_dropped_total", r)+")", "relay {{peer}} {{reason}}/s")),
				ts("Relay truncation", "What did the relay leave out to stay under 768 KiB: whole targets or lines beyond 4096, per store?", "short",
					t("sum by (store, cut) ("+rateOf("grid_signals_relay_truncated_total", r)+")", "{{store}} {{cut}}/s")),
			}},
			{title: "Site-relay", panels: []panel{
				ts("Peer polls by outcome", "Does the relay hear its peers? Polls of each peer relay by outcome.", "reqps",
					t("sum by (peer, outcome) ("+rateOf("grid_peer_poll_total", r)+")", "{{peer}} {{outcome}}")),
				ts("Time since a peer's last good poll", "Is a site silent? Seconds since each peer relay last answered ok.", "s",
					t("time() - max by (peer) (grid_peer_poll_last_success_timestamp_seconds"+r+" > 0)", "{{peer}}")),
				ts("Relay scrapes of the EPP by result", "Does the relay read this site's EPP? Scrapes per provider and result.", "reqps",
					t("sum by (provider, result) ("+rateOf("grid_relay_scrapes_total", r)+")", "{{provider}} {{result}}")),
				ts("Signals requests by client", "Who reads the relay: the local EPP, peers, or refused identities?", "reqps",
					t("sum by (client) ("+rateOf("grid_relay_signals_requests_total", r)+")", "{{client}}")),
			}},
		},
	}
}
