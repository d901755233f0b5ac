// Package server assembles the Switchyard endpoint picker: the ext_proc
// gRPC server (package extproc) on --grpc-port, the gRPC health server on
// --grpc-health-port, Prometheus metrics (and pprof) on --metrics-port, the
// endpoint datastore with its source and metrics scraper, and the
// EndpointPickerConfig with hot reload.
//
// Background loops, each owned by Server.Run and stopped when its context
// ends: the endpoint source (the endpoints-file watcher, or in Kubernetes
// mode the pool watch and leader election of package
// datastore/kubesource, given as Config.Source), the metrics scraper, the
// pool-metrics refresher, the configuration-file watcher, the
// certificate reloader and the metrics-token watcher, the background
// plugins of the serving configuration (below), and, with the multi-site
// signals source on (Config.Multisite), the site-topology file watcher, the
// InferencePoolImport watch (Kubernetes mode), the reloaders of the signals
// client certificate and CA bundle, the poller of the local site-relay,
// the multi-site control step (pkg/multisite/learner: after every
// successful poll and on a 500 ms tick, MultisiteConfig.LearnInterval,
// with the configuration's availability settings) and the health prober
// of the remote sites' gateways (pkg/multisite/gwhealth), whose Demoted
// the learner reads unless MultisiteConfig.Health replaces it.
// Readiness is: the
// source has synced the pool, the source lets this replica serve (it
// leads), and the server is not draining.
// The request path reads two atomically published values: the endpoint
// snapshot and the runtime (scheduler, parser format and flow controller)
// of the current configuration, and the InferenceObjective priorities
// (pkg/objectives, Config.ObjectivesFile or the Kubernetes watch
// Config.Objectives, run as a loop of Run). The multi-site state is
// published the same way: SiteStates (the control step's
// sitestate.Holder, the judged state of every site; SiteHolder is the
// same holder), which the site stage (pkg/multisite/sitestage, given to
// extproc as Options.Sites) reads per request; SiteSnapshot (the site
// store's snapshot) and SiteTopology, each one atomic load, for the
// learner; GatewayHealth, the prober. Remote sites are never endpoints of
// the datastore (see pkg/multisite). /debug/sites shows the rows and,
// under "learner", the judgement (learner.Debug).
//
// # Flow control
//
// The first configuration with the flowControl feature gate creates the
// server's flowcontrol.Controller (flowcontrol.go), which Run runs until
// the server stops; a reload reconfigures it (Controller.Reconfigure), so
// waiting requests stay, re-ordered by the new policies, and a reload that
// turns the gate off lets them drain. Its Pool is the serving
// configuration's saturation detector over the routable endpoints (the
// producers run first, on an empty request, so concurrency-detector sees
// its in-flight view), and while a request the dispatcher released has
// not been scheduled yet the pool counts as saturated, so one free slot
// releases one request (a pick not scheduled within a second stops
// counting). The controller's state is exported at scrape time:
// inference_extension_flow_control_pool_saturation,
// switchyard_flow_control_queue_utilization{limit} and
// switchyard_flow_control_outcomes_total{outcome}. A request the site
// stage sends to another site is not held: flow control guards the local
// pool.
//
// # Background plugins (Runners)
//
// Plugins with background work implement scheduling.Runner (the
// active-health-check plugin; the circuit-breaker, served-model-filter
// and caller-scope-filter, which watch the whole pool through
// scheduling.PoolWatcher). Run starts each Runner instance of the
// serving configuration on a goroutine of its own, with a RunEnv over the
// datastore (Endpoints: Snapshot().All(), Changed: Store.Changed()), once
// the server runs: New, and so `epp validate`, starts none. When a reload
// serves, the Runners of instances it built start, those of instances it
// kept from the previous configuration keep running untouched, and those
// of instances it dropped are cancelled before the instances are closed;
// a Runner also watches its instance's Handle context, which Close
// cancels. Run waits for every Runner before it closes the serving
// configuration.
//
// # Tracing
//
// With Config.Tracing on, New builds the OpenTelemetry provider
// (pkg/tracing) and hands its tracer to extproc; its exporter goroutines
// run until Run, after the last stream ended, flushes the queued spans
// and stops them (at most TracingShutdownTimeout). A New that fails stops
// it too.
//
// # Eligibility
//
// The request path routes to the datastore's Routable set (eligible — not
// failed by an active health check, circuit breaker not open — and fresh,
// failing open on freshness only among the eligible; see package
// datastore). /debug/endpoints shows, per endpoint, whether it is
// routable, its rotation state and why it is out (unhealthy,
// breaker_open, stale), the health check's verdict, the breaker's state
// (and until when it is open), its weight, models and internal flag.
// switchyard_endpoint_health{endpoint,state} (state routable, half_open,
// stale, unhealthy, breaker_open; at most 1000 endpoints, in name order)
// and switchyard_endpoints{state} (every endpoint) are computed from the
// published snapshot when scraped. Endpoints that leave the pool, or
// change identity, are reported to the plugins' Forget and Prune (the
// circuit breaker's state, the in-flight producer's index).
//
// Hot reload: when the configuration file changes, a valid new
// configuration takes over from the next request; instances with the same
// name, type and parameters are kept with their state (config.Options.
// Previous), endpoint state lives in the datastore and is untouched. An
// invalid file is refused with a log line and
// switchyard_config_reloads_total{result="failure"}; the last good
// configuration stays. Once the new configuration serves, the instances of
// the old one it did not keep are closed (config.Loaded.Release) and their
// metric series deleted; the serving configuration is closed when Run
// returns. Configurations are bounded by config.Options' limits (1 MiB,
// 512 plugins, 64 profiles, 128 references per profile).
//
// Listeners (listeners.go) and their bounds: the ext_proc server limits
// streams per connection (Config.GRPCMaxConcurrentStreams) and in all
// (Config.MaxStreams, RESOURCE_EXHAUSTED beyond), closes idle connections,
// bounds handshakes, metadata, messages and flow-control windows; the
// extproc.Server bounds buffered bytes and the time a request may take to
// arrive. The metrics port serves /metrics, and /debug/endpoints,
// /debug/sites (the site topology, the poller's last result, every
// site's latest rows and each remote gateway's probe state;
// {"enabled": false} without the multi-site source), /debug/decisions
// (the recent decisions, pkg/decisions; Config.DecisionBufferSize)
// and /debug/pprof/ (Config.EnablePprof) only behind authentication:
// Config.MetricsFilter (Kubernetes mode's --metrics-endpoint-auth) or
// Config.MetricsTokenFile (a static bearer token, watched); without either
// the debug paths answer 404 and pprof is refused at start. The admin API
// (admin.go, pkg/server/admin: /admin/backends, /admin/stats/backends,
// /admin/backends/{name}/engine-stats, /admin/prefix-routing/stats) sits
// beside them with its own guard: Config.AdminTokenFile's bearer token
// (--admin-token-file), else Config.MetricsFilter; without either it
// answers 404. The metrics token does not open it.
//
// Subpackages: health (the gRPC health service), metricsauth
// (--metrics-endpoint-auth) and admin (the admin API's routes). The static bearer token (--metrics-token-file)
// is checked by pkg/tokenauth and TLS (self-signed and reloaded
// certificates, peer identities) comes from pkg/tlsutil; both sit outside
// this package because the site-relay uses them too (it must not import a
// server package). Imported by cmd/epp.
package server
