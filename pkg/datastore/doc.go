// Package datastore holds the endpoint picker's view of the pool: the
// model-server endpoints, their latest scraped metrics, their live request
// statistics, and the readiness of the endpoint set. Endpoint sources (the
// endpoints file in package endpointsfile, the Kubernetes pod watch) write
// to a Store; the metrics scraper (package scrape) reports scrape results
// to it; the ext_proc request path reads immutable Snapshots.
//
// Who may import it: cmd/epp, the server and ext_proc handler, endpoint
// sources and the scraper. It imports pkg/scheduling, pkg/fielderr (its
// FieldError, ValidationError and ErrorList are aliases of those types) and
// no plugin other than coremetrics (for the reserved engine name).
//
// # Snapshots
//
// Every change is published as a new *Snapshot behind an atomic pointer:
// Store.Snapshot is one atomic load, with no lock and no allocation, and a
// snapshot never changes once published. Snapshot.All lists every endpoint
// by name; Routable lists the endpoints requests may go to (see
// Eligibility below) and is what the request path reads; Ready lists the
// endpoints with fresh metrics, whatever their health (kept for callers
// that mean only that); ByHostPort, ByIP and Lookup find endpoints by
// address or key.
//
// Endpoints are *scheduling.Endpoint values carrying the endpoint data of
// pkg/scheduling, which plugins read without importing this package:
// scheduling.LoadKey (the endpoint's *EndpointStats, the same pointer for
// the endpoint's whole life; StatsKey reads the same attribute with its
// concrete type), scheduling.WeightKey (EndpointSpec.Weight; WeightKey is
// the same key), scheduling.ModelsKey (EndpointSpec.Models, absent when
// the endpoint declares none), scheduling.InternalKey (set when
// EndpointSpec.Internal is), scheduling.HealthKey (the endpoint's
// *scheduling.EndpointHealth, one per endpoint for its life), EngineKey
// (the engine whose metric names the scraper reads), and ProviderTPMKey
// and ProviderRPMKey (EndpointSpec.ProviderTPM and ProviderRPM, absent
// when not declared; the usage-weight-scorer reads them by name).
//
// Endpoint-set changes (Replace, Upsert, Delete, SetSynced) publish at
// once. Scrape results are coalesced: ReportScrape only records them, and
// Store.RunPublisher (run by the scraper) publishes at most once per short
// gap — a fifth of the scrape interval by default — so a round of 1000
// scrapes costs a few O(N) rebuilds, not 1000. Only endpoints whose
// metrics changed get a new *scheduling.Endpoint; lookup maps are rebuilt
// only when the endpoint set changes.
//
// # Freshness
//
// An endpoint's metrics are fresh when its last scrape succeeded and
// finished at most StalenessThreshold ago (--metrics-staleness-threshold,
// default 2s). A failed scrape (connection refused, timeout, HTTP status,
// oversized or unparsable body, no known metric present) makes the
// endpoint stale immediately — at the next publish, within one scrape
// interval — rather than after the threshold, so an endpoint that dies
// stops getting requests at once. So does a scrape that read the metrics
// but left the endpoint's load unknown (ScrapeResult.LoadUnknown: a queue,
// running-requests or KV-cache value that is NaN, ±Inf, negative or
// absent): a value that cannot be read must never look like an idle
// server. Such an endpoint is stale exactly like a failing one, its
// snapshot keeps the last good metrics (never the zeros of the bad
// scrape), ScrapeStatus.LoadUnknown says which metric and why, and
// Snapshot.LoadUnknownCount counts it. An endpoint whose scrapes hang is caught
// by the publisher's periodic sweep (every StalenessThreshold/10) once its
// last success is older than the threshold. A newly added endpoint is
// stale until its first successful scrape. Freshness is judged when a
// snapshot is published: Snapshot.Stale and Ready answer as of
// PublishedAt.
//
// Unlike GIE v1.5, whose scorers use the last scraped values whatever
// their age, Ready excludes stale endpoints. Fail-open keeps this safe: if
// the pool has endpoints but none is fresh (the metrics port is blocked,
// every server is overloaded or reports unreadable load, the scraper just
// started), Ready returns every endpoint and Snapshot.FailOpen reports it
// so the caller can count it — except the endpoints whose load is unknown
// while any endpoint's scrape merely fails: those report values that would
// read as idle, so they are left out unless every endpoint's load is
// unknown. Fail-open is the only way a request reaches an endpoint whose
// scrapes fail or whose load is unknown, and it happens only when no
// endpoint is healthy. When no scraper runs (the data layer is disabled),
// SetScrapingEnabled(false) — the default — makes every endpoint ready and
// none stale.
//
// An endpoint without metrics to read (EndpointSpec.NoScrape: the
// endpoints file's scrape: false, the switchyard.ai/scrape: "false" pod
// annotation; e.g. a hosted API behind a proxy) is left out of Targets,
// never scraped, and always fresh: it has no metrics to be stale, so it
// is in Ready and, when eligible, in Routable. Its load is not measured:
// its scheduling.Metrics stay zero with a zero UpdateTime (an endpoint
// switched to NoScrape drops the metrics it had), the mark plugins read
// as "never measured" (engine-load-picker and the utilization detector
// take it for stale, not idle; the load scorers score it 0 next to
// measured endpoints). Fail-open is judged on the scraped endpoints
// alone: when none of them is fresh, they fail open beside the unscraped
// ones, which therefore never take all the traffic because the others'
// scrapes broke.
//
// # Eligibility
//
// Freshness says whether an endpoint's metrics can be trusted; eligibility
// says whether it may take requests at all. Each endpoint's
// *scheduling.EndpointHealth holds two verdicts that plugins write: the
// active health check's (active-health-check: ProbeUnhealthy after
// unhealthyThreshold failed probes) and the circuit breaker's
// (circuit-breaker: open after consecutive failures, for an interval,
// then half-open). An endpoint is eligible when EndpointHealth.Eligible
// says so at publish: not unhealthy, breaker not open (an open breaker
// whose interval ended reads as half-open, which is eligible). The
// setters are lock-free and may run on the request path: a change sets a
// flag and wakes RunPublisher without blocking, which republishes off the
// request path within the publisher's gap; the publisher's sweep also
// republishes when an open breaker's interval ends, since eligibility
// changes with time then.
//
// Snapshot.Routable is computed at publish, a precomputed slice like
// Ready: the eligible endpoints with fresh metrics. Fail-open applies to
// freshness only, and only among the eligible: if some endpoint is
// eligible but none of those is fresh, Routable holds every eligible
// endpoint (RoutableFailOpen reports it) except, as in Ready, those whose
// last scrape left their load unknown (ScrapeStatus.LoadUnknown), unless
// every eligible endpoint's load is unknown: their last metrics would
// make them look idle and win every pick. It never re-admits an
// ineligible endpoint: when none is eligible, Routable is empty and the
// request path answers 503. A stale endpoint that a health check or
// breaker took out thus stays out however the metrics fare, and a pool
// whose metrics all fail still serves from its healthy endpoints.
// Snapshot.OutOfRotation says why an endpoint is not routable (unhealthy,
// breaker_open, stale); /debug/endpoints shows it.
//
// # Identity and statistics
//
// Store keys endpoints by EndpointSpec.Name, which is unique in the pool;
// Delete, Stats, ScrapeStatus and Snapshot.Lookup accept the name or the
// key. The key has one definition, scheduling.EndpointKey, which both
// EndpointSpec.Key and Endpoint.Key use, so the store's index, the scrape
// targets, the OnRemoved callbacks and Snapshot.Stale agree on it:
// "site:namespace/name", leaving out an empty site (with its ':') or
// namespace (with its '/'): "namespace/name" in Kubernetes mode, the name
// in standalone mode, as in GIE. Neither a site, a namespace nor a name
// holds ':' or '/', so no two of these keys collide. An
// endpoint's identity is its site, namespace, name, address and port:
// while it is unchanged, Replace and Upsert keep the endpoint's metrics,
// scrape status, EndpointStats and EndpointHealth (label, weight, engine,
// models, internal or metrics-port changes are updates). When the identity
// changes, or the endpoint leaves, the OnRemoved callbacks get its key so
// that per-endpoint state elsewhere (prefix index, breaker counters) can be
// dropped.
//
// EndpointStats is the one source of truth for the requests this picker
// has in flight on an endpoint: the ext_proc server counts a request on
// the endpoint that serves it (moving it when the gateway falls back to
// another endpoint of the list), and plugins read it through
// scheduling.LoadKey (the inflight-load-producer is a view over it).
// It counts requests in flight (and their tokens), requests
// served and failed, and keeps exponentially weighted moving averages
// (alpha EWMAAlpha = 0.2) of time to first token and end-to-end latency.
// All updates are atomic; the averages use compare-and-swap loops.
//
// # Sites
//
// The datastore holds the local site's endpoints only. The endpoint
// sources (the endpoints file, the Kubernetes pool watch) leave
// EndpointSpec.Site empty, which means the local site. In multi-site mode
// the other sites are not endpoints here: they are destinations whose load
// arrives through the local site-relay and lives in the site store
// (pkg/multisite/sitestore), so a remote site's change can never Replace
// (wipe) the local pods, and the scraper, which scrapes what Targets
// returns, never sees a remote site (see pkg/multisite).
//
// # Endpoint sources
//
// Replace sets the whole set (the endpoints file, a Kubernetes resync);
// Upsert and Delete change one endpoint (Kubernetes pod events). All
// validate their input and report every problem with its field path
// (ValidateSpecs). SetSynced(true) marks the pool as loaded, for readiness.
// The endpoints file format is described in package endpointsfile.
package datastore
