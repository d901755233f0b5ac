// Package signals is the wire format of multi-site load signals: the body
// a site-relay serves on GET /v1/site/signals, to its peer relays and to
// its local EPP. Encode writes a body; Parse reads one.
//
// # Who imports it
//
// pkg/multisite/relay (the site-relay: it encodes what it serves and parses
// what its peers serve) and pkg/multisite/poller (the EPP's poller of its
// local relay). It imports only the standard library and starts no
// goroutine.
//
// # Format
//
// Prometheus text exposition, version 0.0.4 (Content-Type
// "text/plain; version=0.0.4"), restricted to a closed set of series. Each
// line is one sample with a millisecond timestamp:
//
//	llm_d_epp_average_running_requests{grid_site="a",grid_cluster="c1",grid_provider="pool"} 3.5 1767225600000
//
// Per provider (labels grid_site, grid_cluster, grid_provider):
//
//	llm_d_epp_average_running_requests      the EPP pool gauges, read at one
//	llm_d_epp_average_queue_size            instant by the relay (G-05)
//	llm_d_epp_ready_endpoints
//	llm_d_epp_flow_control_queue_size
//	llm_d_epp_average_kv_cache_utilization
//	grid_provider_config_generation         one per qualified batch (G-06):
//	                                        an integer, exact in a float64
//	grid_provider_publishes_load            0 or 1 (G-47)
//
// Per peer polled by the relay (label grid_site only, the peer):
//
//	grid_peer_poll_round_end_timestamp_seconds  end of the last poll round
//	                                            that tried the peer
//	grid_peer_poll_rounds_total                 poll rounds that tried it
//
// Every response carries a Date header (RFC 1123) read from the same clock
// as the stamps; the receiver judges stamps against it (the skew rule), so
// that the clocks of different sites never need to agree. Date has whole
// seconds; the same reading in Unix milliseconds comes in the
// X-Grid-Now-Ms header (HeaderNow; SetClock writes both, ResponseClock
// reads them), so that a receiver can tell a row's age at the sender
// (now minus its stamp) to the millisecond. A receiver falls back to Date
// when X-Grid-Now-Ms is absent or not inside the second Date names.
//
// # Rules
//
// A label value must be a DNS-1123 label (grid_site, grid_provider) or
// subdomain (grid_cluster); the labels of a series are exactly the ones
// above, in any order; a value is finite and non-negative (publishes_load
// 0 or 1, config_generation an integer of at most 2^53). Blank lines and
// lines starting with '#' (HELP, TYPE, comments) are skipped. Anything
// else is malformed.
//
// Parse reads at most Limits.MaxBytes bytes and refuses a bigger body
// whole (ErrTooLarge). It keeps every other problem to the row it concerns
// and counts the refused rows by DropReason, checked in this order:
//
//   - parse: a malformed line, an unknown series, a label missing, extra or
//     repeated, an invalid name, a non-finite or negative value;
//   - site_mismatch: a grid_site that ParseOptions.SiteAllowed refuses, or,
//     for a peer's body, any grid_site other than ParseOptions.ExpectedSite
//     (the verified identity of the sender decides, never the labels);
//   - skew: a stamp more than 1 s after ParseOptions.Date or more than 24 h
//     before it (G-75; no check when Date is zero);
//   - cap: a row beyond Limits.MaxLinesPerTarget rows of its target
//     (grid_site, grid_provider) in body order, or a row of a provider
//     beyond the first Limits.MaxProvidersPerSite providers of its site,
//     by name.
//
// Encode writes every site's peer-round rows first, then the local
// site's provider targets, then the peers' (each part sorted by site,
// provider and series name). It cuts each target at MaxLinesPerTarget
// rows and drops the providers of a site beyond the first
// MaxProvidersPerSite by name; then it holds the body within MaxBytes by
// dropping targets, keeping as long as they fit, in this order: the round
// rows, the local site's grid_provider_publishes_load rows, the local
// targets, then the room left shared fairly between the peer sites
// (max-min: a site needing less than an equal share keeps every target),
// each peer site over its share keeping its publishes_load rows first
// (charged to its share), then its other targets. A dropped target keeps
// its publishes_load rows when they fit (the EPP's store would take a
// missing one for unmeasured) and loses its other rows; one whose
// publishes_load rows do not fit loses all. So one site serving huge
// targets cannot push the local site or another site out, round
// rows included. What it left out is returned as a Truncation for
// grid_signals_relay_truncated_total{store,cut}.
package signals
