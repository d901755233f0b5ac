// Package metrics records the endpoint picker's own Prometheus metrics under
// the names GIE v1.5.0 and llm-d router use, so that their Grafana
// dashboards and alerts work unchanged, plus a few switchyard_* metrics.
//
// New registers everything on an injected prometheus.Registerer (never the
// global default registry) and reuses collectors that are already
// registered there. The request path (pkg/extproc) calls the methods of
// *Metrics (extproc.New attaches its buffer budget with BufferBudget);
// pkg/server calls UpdatePool from its pool refresh loop,
// ConfigReload after every configuration load and SetInfo once. Any package
// may import it; it imports only client_golang.
//
// # Speed
//
// Each request-path method looks up its label children in a sync.Map keyed
// by the label values and resolves them with WithLabelValues only the first
// time. A call whose labels were seen before takes no lock and allocates
// nothing (see the benchmarks).
//
// # Cardinality
//
// model_name and target_model_name come from request bodies, pod_name from
// discovery: each is capped (MaxModelLabelValues, MaxEndpointLabelValues,
// ...), later values are recorded under OverflowLabelValue ("other"), and
// values are made valid UTF-8 and cut to MaxLabelValueBytes. Reasons of
// switchyard_request_refusals_total must come from the caller's closed set.
//
// # Metrics
//
// Names, types and labels (model = model_name, target_model_name). GIE's
// histogram buckets are used for every histogram.
//
//	name                                                          type       labels
//	inference_objective_request_total                             counter    model, priority
//	inference_objective_request_error_total                       counter    model, error_code
//	inference_objective_request_duration_seconds                  histogram  model
//	inference_objective_request_sizes                             histogram  model
//	inference_objective_response_sizes                            histogram  model
//	inference_objective_input_tokens                              histogram  model
//	inference_objective_output_tokens                             histogram  model
//	inference_objective_prompt_cached_tokens                      histogram  model
//	inference_objective_normalized_time_per_output_token_seconds  histogram  model
//	inference_objective_request_ttft_seconds                      histogram  model
//	inference_objective_running_requests                          gauge      model_name
//	inference_extension_scheduler_e2e_duration_seconds            histogram  -
//	inference_extension_scheduler_attempts_total                  counter    status, target_model_name, pod_name, namespace, port
//	inference_extension_info                                      gauge      commit, build_ref
//	inference_pool_average_kv_cache_utilization                   gauge      name
//	inference_pool_average_queue_size                             gauge      name
//	inference_pool_average_running_requests                       gauge      name
//	inference_pool_ready_pods                                     gauge      name
//	inference_pool_per_pod_queue_size                             gauge      name, model_server_pod
//	llm_d_epp_average_kv_cache_utilization                        gauge      name
//	llm_d_epp_average_queue_size                                  gauge      name
//	llm_d_epp_average_running_requests                            gauge      name
//	llm_d_epp_ready_endpoints                                     gauge      name
//	llm_d_epp_per_endpoint_queue_size                             gauge      name, model_server_endpoint
//	llm_d_epp_flow_control_queue_size                             gauge      fairness_id, priority, inference_pool, model
//	inference_extension_flow_control_queue_size                   gauge      fairness_id, priority, inference_pool, model
//	inference_extension_flow_control_queue_bytes                  gauge      fairness_id, priority, inference_pool, model
//	inference_extension_flow_control_request_queue_duration_seconds histogram fairness_id, priority, outcome, inference_pool, model
//	inference_extension_flow_control_request_enqueue_duration_seconds histogram fairness_id, priority, outcome
//	inference_extension_flow_control_dispatch_cycle_duration_seconds histogram -
//	switchyard_request_refusals_total                             counter    reason
//	switchyard_config_reloads_total                               counter    result
//	switchyard_config_last_reload_success_timestamp_seconds       gauge      -
//	switchyard_extproc_buffered_bytes                             gauge      -
//	switchyard_extproc_buffered_bytes_limit                       gauge      -
//
// Meaning:
//
//   - request_total counts requests received; model_name is the model the
//     client asked for, target_model_name the model the request is sent to;
//     priority is the InferenceObjective priority.
//   - request_error_total counts requests that ended in an error, by GIE
//     error code (BadRequest, ResourceExhausted, ServiceUnavailable,
//     Internal, ModelServerError, ... see the ErrorCode constants).
//   - request_duration_seconds: receipt of the request to the end of the
//     response. ttft_seconds: receipt to the first response body byte.
//     normalized_time_per_output_token_seconds: duration / output tokens.
//   - request_sizes / response_sizes: body sizes in bytes (GIE's names,
//     without a unit suffix).
//   - input_tokens / output_tokens / prompt_cached_tokens: the usage the
//     model server reported.
//   - running_requests: requests in flight per requested model.
//   - scheduler_e2e_duration_seconds: one scheduling cycle.
//     scheduler_attempts_total: scheduling outcomes (status success or
//     failure); successes name the primary endpoint picked.
//   - info: always 1; the labels carry the build commit and ref.
//   - inference_pool_* and the matching llm_d_epp_* gauges: recomputed by
//     UpdatePool every --refresh-prometheus-metrics-interval (5 s). The
//     averages and ready_pods/ready_endpoints cover endpoints with fresh
//     metrics only (0 when there is none); the per-pod queue gauges cover
//     every endpoint and drop endpoints that left. The name label is the
//     pool name given to New (llm-d router labels its pool gauges the same
//     way).
//   - flow control (the flowControl feature gate; extproc's hold step
//     calls FlowWaiting and FlowDone): ..._queue_size and
//     llm_d_epp_flow_control_queue_size count the requests inside flow
//     control per flow (fairness_id, priority) and model, ..._queue_bytes
//     the memory they hold (body and parsed prompt, what flowControl.maxBytes
//     counts; GIE counts the body alone), from their admission to the queue
//     to their outcome (a request dispatched or refused at once never shows). ..._request_queue_duration_seconds is each request's time
//     there and ..._request_enqueue_duration_seconds the time its
//     admission took, by outcome: GIE's names (FlowOutcomes: Dispatched,
//     RejectedCapacity, RejectedOther, EvictedTTL,
//     EvictedContextCancelled, EvictedOther; GIE's dashboard selects
//     outcome="Dispatched"). fairness_id is capped at
//     MaxFairnessLabelValues, priority at MaxPriorityLabelValues, and their
//     combinations at MaxFlowLabelPairs (a pair past it records fairness_id
//     "other" with its priority).
//     ..._dispatch_cycle_duration_seconds is observed by FlowDispatchCycle
//     (pkg/server calls it from the controller's dispatch-cycle Observer).
//     The series llm_d_epp_flow_control_queue_size{inference_pool="<pool>"}
//     with empty flow labels stays 0; it exists so that llm-d dashboards
//     show 0 rather than "no data" before any request was queued. The pool
//     saturation gauge, the queue's capacity in use and the outcome
//     counters are read from the controller at scrape time by pkg/server.
//   - switchyard_request_refusals_total: requests answered by the EPP
//     itself (400, 408, 413, 429, 503), by machine-readable reason; among
//     them buffer_budget_exhausted (the buffer budget below is used up) and
//     body_timeout (a body not complete within --request-body-timeout).
//   - switchyard_extproc_buffered_bytes: body bytes the ext_proc streams
//     hold now while they wait for the rest of a body;
//     ..._buffered_bytes_limit is the process-wide budget
//     (--max-buffered-request-bytes). Both are read from the server's
//     atomic counter at scrape time (BufferBudget), so the request path
//     updates no metric per chunk; they appear once the ext_proc server
//     has attached its budget.
//   - switchyard_config_reloads_total{result="success|failure"} counts
//     configuration loads; ..._last_reload_success_timestamp_seconds is the
//     Unix time of the last successful one.
//
// Not exported (GIE features Switchyard does not have): the latency
// predictor histograms, SLO violation counters, prefix indexer metrics
// and model rewrite decisions. The
// plugin duration histogram lives in pkg/scheduling.
//
// # promlint
//
// Every name passes promlint except llm-d router's llm_d_epp_* names:
// promlint reads the "_d_" of the prefix as an abbreviated unit (d = days).
// They are kept because llm-d dashboards query them; the lint test exempts
// exactly that finding for exactly those names.
package metrics
