// Package multisite is the root of the multi-site signal path (seed 000,
// "cross-site site selection"): each site runs a site-relay that scrapes
// its own EPP, polls its peer relays over mutual TLS and relays every
// site's load to its local EPP; the EPP polls its local relay only and
// keeps what it learns in a site store that the site stage of the request
// path (issue 13) reads. This package holds no code; its subpackages do:
//
//	signals    the wire format between relays and from a relay to its EPP
//	           (Prometheus text rows with millisecond stamps and a Date
//	           header): Encode, Parse, limits, drop reasons
//	relay      the site-relay (cmd/site-relay): EPP scrape, peer polling
//	           with verified identities, assembly of the body it serves
//	poller     the EPP's poller of its local relay: mTLS with the relay's
//	           identity checked, bounded reads, the grid_signals_* metrics
//	sitestore  the EPP's site store: the latest rows per (site, cluster,
//	           provider) and the judgement clocks, published as an
//	           immutable snapshot by atomic swap
//	topology   the sites the EPP knows (name, cluster, gateway address,
//	           models), from a watched file and, in Kubernetes mode,
//	           InferencePoolImport status
//	learner    the control step: learned ceilings, rho, silence, full
//	           and shedding per site and model, published as one
//	           sitestate.Snapshot per step; the availability settings and
//	           the grid_route_site_* and grid_route_shedding gauges
//	sitestate  the snapshot contract between the learner (control step)
//	           and the site stage (request step)
//	sitestage  the request step: a site for every request (404/429/503,
//	           tiers, affinity, draws), before the scheduling profiles
//	gwhealth   the health probes of the remote sites' gateways, whose
//	           Demoted the learner reads
//
// # Remote sites are not endpoints
//
// A remote site is a destination, not a model-server endpoint: it is not
// in the endpoint datastore (pkg/datastore), which holds only the local
// site's pods. Its load arrives through the relay and lives in the site
// store, keyed by the site name the relay verified. So an endpoint source's
// Replace, which sets the whole local endpoint set, never sees, and never
// wipes, a remote site, and a change of the topology never touches a
// local pod; the model-server scraper, which scrapes the datastore's
// targets, never contacts a remote site (it could not: only its relay may).
// The request path will read two snapshots, the endpoint snapshot for the
// local pick and the site snapshot for the site stage, each one atomic
// load.
//
// # Trust
//
// The EPP trusts one relay, its own site's, whose certificate identity it
// checks (pkg/tlsutil); the relay keys every peer's rows on the peer's
// verified identity, never on labels in the body (G-02, G-03). The EPP
// accepts rows only for the sites of its topology (and, for a site, only
// its cluster): anything else is dropped and counted as site_mismatch.
//
// # Goroutines
//
// Every loop (the poller, the topology file watcher, the
// InferencePoolImport watch) is started and stopped by its owner, the
// EPP's pkg/server Run; the site store and topology values are passive.
package multisite
