// Package relay is the site-relay (cmd/site-relay), one per site: it
// scrapes its site's EPP, polls every peer relay over mutual TLS, and
// serves every site's load signals to its local EPP, in the wire format
// of pkg/multisite/signals.
//
// # Who imports it
//
// cmd/site-relay, and tests. It imports pkg/multisite/signals, pkg/tlsutil,
// pkg/fielderr, pkg/internal/yamldoc and pkg/tokenauth (ReadToken
// only, so the bearer token file follows the EPP's rules).
//
// # Goroutines
//
// Run owns every goroutine it starts and returns once all have stopped:
// the signals server (mutual TLS) and the admin server, the certificate
// and CA bundle watchers, the scrape loop and the peer poll loop. Each
// scrape runs the metrics endpoints concurrently and each poll round the
// peers concurrently, and waits for them. Serve is Run without the two
// loops, for callers that drive ScrapeOnce and PollRound (tests with a
// fake Clock).
//
// # Scraping (G-01, G-05 … G-08, G-50)
//
// Every scrapeInterval (default 1 s; GRID_SIGNALS_SCRAPE_INTERVAL_SECS, in
// seconds, overrides the file and a flag overrides both) the relay GETs
// each provider's metricsConfig.endpoint, the EPP Service's /metrics
// (providers with the same endpoint share one GET), with the bearer token
// of bearerTokenFile when set, over TLS for an https endpoint (caFile or
// the system roots, serverName, or insecureSkipVerify). One GET reads the
// five pool series at one instant (G-05), stamped with the time the
// response arrived:
//
//	llm_d_epp_average_running_requests      {name="<provider>"}
//	llm_d_epp_average_queue_size            {name="<provider>"}
//	llm_d_epp_ready_endpoints               {name="<provider>"}
//	llm_d_epp_average_kv_cache_utilization  {name="<provider>"}
//	llm_d_epp_flow_control_queue_size       sum of the series {inference_pool="<provider>"}
//
// A series without that label is the provider's only when its endpoint
// serves that one provider; on an endpoint shared by several providers it
// is attributed to none (not read, counted in
// grid_relay_scrape_unattributed_series_total, and named in the
// MetricsAvailable message). A series that is absent, NaN, infinite or
// negative is not read. A scrape
// that read all five is a qualified batch: it carries one
// grid_provider_config_generation row (G-06), stamped with the batch. The
// generation is a 53-bit FNV-1a hash of the site, cluster, provider name,
// the provider's configGeneration (set it from the InferencePool's
// metadata.generation, or a checksum of the EPP's configuration, to
// restart learning) and the EPP's build (the labels of
// inference_extension_info): it survives EPP and relay restarts, and
// changes when the declared configuration or the EPP build changes. A
// batch missing some series still carries those it read, without a
// generation row: fresh pressure stays usable, learning is disabled.
//
// The endpoint must be the EPP Service (G-07): a pod DNS name
// (a-b-c-d.<ns>.pod...) is refused; an IP address other than loopback is
// accepted with a warning (it may be the Service's cluster IP).
//
// A failing scrape keeps the provider's last batch, relayed with its own
// stamps, for staleMetricsSeconds (default 30, G-08): the EPP sees no new
// sample and judges the site silent, while its last readiness stands.
// After that the readiness is no longer kept: the batch is dropped and a
// single llm_d_epp_ready_endpoints 0 row, stamped at the window end (one
// sample however often it is served; relayed until it is MaxAge old),
// tells the EPP, whose store would otherwise keep the last readiness
// standing (rows a body leaves out keep their value). A provider no scrape
// has read since the relay started (its metrics failing across a restart)
// gets the same row once staleMetricsSeconds has passed since the start,
// stamped then, so the readiness the EPP holds from the relay's previous
// run does not stand either. A peer relay does not
// count that lone 0 as a load row (G-47 b). Either way the provider still
// publishes load (G-50), and its MetricsAvailable condition (on /status)
// is False with the reason (ScrapeFailed, HTTPStatus, Unauthorized,
// TooLarge, Malformed, NoSeries, TokenFile) and the error as message;
// True with reason Scraped (qualified) or IncompleteBatch otherwise;
// False with NoMetricsConfig for a provider without metricsConfig; Unknown
// (Pending) before the first scrape.
//
// # Peers (G-02, §2.11 #5)
//
// Every peerPollInterval (default 2 s) a round polls every peer's
// /v1/site/signals concurrently, presenting the relay's certificate; the
// peer's certificate must prove peers[i].identity (default
// spiffe://<trustDomain>/site/<peer>), and chain to tls.caFile when set
// (see pkg/tlsutil). The rows a peer serves are keyed on that verified
// site only: a row naming another grid_site is dropped (site_mismatch),
// whatever the peer claims. connectTimeout bounds the connect and TLS
// handshake, requestTimeout (at most peerPollInterval) the whole poll. A
// body is read up to 1 MiB and judged against the peer's Date header (the
// skew rule); at most 64 providers per peer. Each poll is counted in
// grid_peer_poll_total{peer,outcome}, outcomes ok, unreachable,
// bad_identity (the peer's certificate is not its identity), unauthorized
// (the peer refused us: a TLS alert, or 401/403), bad_status (another
// status, a redirect too: redirects are never followed), too_large,
// no_date. A failed poll keeps the peer's last rows with their stamps.
// Logs: one error when a peer starts failing, one line when it recovers.
//
// Kept rows are re-stamped on this relay's clock, keeping their age at
// the peer: stamp = receipt − (peer's now − peer's stamp), so the clocks
// of different sites never need to agree. The peer's now is its
// X-Grid-Now-Ms header (milliseconds; this relay sends it too, with Date,
// from one clock reading), or its Date when it sends none (whose
// one-second precision can make a row look up to a second younger, never
// newer than its receipt). A row is re-stamped once: while the peer's
// stamp of a (provider, series) is unchanged the relayed stamp stays the
// same on every poll (an unchanged row is never a new sample for the EPP),
// also after polls whose body left the series out (the re-stamps are kept
// until the provider is forgotten, bounded by the providers cap times the
// closed set of series), and a row with another peer stamp gets a relayed stamp later than the
// last one (a new sample is never older than the one before it). Every
// round, failed or not, advances each peer's round count and round end,
// relayed as grid_peer_poll_rounds_total and
// grid_peer_poll_round_end_timestamp_seconds rows.
//
// # Serving (G-03, G-47, G-71)
//
// GET /v1/site/signals requires a client certificate; its verified
// identity decides what is served: the local EPP (localEPP.identity,
// default spiffe://<trustDomain>/site/<site>/epp) gets every site's rows
// (its own and its peers', each tagged with the verified site), a peer
// gets this site's rows only, and anyone else 403 (with a JSON body, so
// that client can count "unauthorized"). The identities of the local
// EPP, of every peer and of this relay (spiffe://<trustDomain>/site/<site>)
// must be told apart: validation refuses two that overlap as a verifier
// compares them (tlsutil.Identity.Overlaps: a pin in another case or with
// colons, a SPIFFE ID with an upper-case trust domain or a trailing slash,
// a SPIFFE ID pinned in one place and not in another), with the field
// path of the later one. The Date header and the rows
// stamped "now" come from one clock reading, sent again in milliseconds as
// X-Grid-Now-Ms.
//
// Every provider gets a grid_provider_publishes_load row (G-47): 0 for
// this site's providers without metricsConfig (a), 1 for those with one,
// even while their scrape fails (G-50); for a peer's provider, 1 when the
// peer says so and this relay has received load rows for it since it
// started (b), so after a restart during a partition the peer's providers
// are unmeasured until it returns (G-49).
//
// The body to the EPP is sorted by site (this site first), provider and
// series, cut at 4096 rows per target (grid_site, grid_provider) and held
// under 768 KiB by dropping targets: round rows first, then this site's
// grid_provider_publishes_load rows and targets, then the room left shared
// fairly between the peer sites, each keeping its publishes_load rows
// before its other targets (signals.Encode); both cuts are counted in
// grid_signals_relay_truncated_total{store,cut} (G-71).
//
// # Endpoints and metrics
//
// The admin port (plain HTTP) serves /healthz, /readyz (200 once Run
// serves), /status (JSON: providers with their MetricsAvailable condition,
// generation and last read; peers with their last outcome and message,
// rounds, last success) and /metrics. The relay's metrics:
//
//	grid_peer_poll_total{peer,outcome}                 counter  polls of each peer, by outcome
//	grid_peer_poll_last_success_timestamp_seconds{peer} gauge   last ok poll of each peer
//	grid_peer_poll_rounds_total                        counter  poll rounds
//	grid_peer_ingest_dropped_total{peer,reason}        counter  refused rows of peer bodies
//	grid_signals_relay_truncated_total{store,cut}      counter  what the body to the EPP left out
//	grid_relay_signals_requests_total{client}          counter  local_epp, peer, refused
//	grid_relay_signals_response_bytes{client}          gauge    size of the last body served
//	grid_relay_scrapes_total{provider,result}          counter  EPP scrapes by result
//	grid_provider_metrics_available{provider}          gauge    1 while MetricsAvailable is True
//	grid_relay_scrape_unattributed_series_total        counter  unlabelled series on a shared endpoint
//	switchyard_tls_certificate_reloads_total{purpose,result}    counter  certificate reloads
//	switchyard_tls_certificate_expiry_timestamp_seconds{purpose} gauge   NotAfter of the certificate
//	switchyard_tls_ca_bundle_reloads_total{purpose,result}      counter  CA bundle reloads
//
// The relay's certificate and CA bundle carry purpose="relay_server" (the
// one certificate is served to clients and presented to peers).
//
// Every label set is closed: peers and providers come from the
// configuration, the other labels from the constants of this package and
// of pkg/multisite/signals.
//
// # Bounds
//
// Configuration files up to 1 MiB; EPP metrics bodies up to 16 MiB
// (streamed, only the wanted families kept); peer bodies up to 1 MiB;
// bodies served up to 768 KiB; 63 peers, 64 providers; 256 connections per
// port; header, read, write and idle timeouts on both servers.
package relay
