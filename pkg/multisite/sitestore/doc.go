// Package sitestore is the EPP's site store: the latest load rows of
// every site of the topology, as the local site-relay relays them, and the
// clocks that judge them, published as an immutable Snapshot by atomic
// swap. Part 2's learner and site stage (issue 13) read it; nothing here is
// on the request path beyond Store.Snapshot, one atomic load with no lock.
//
// # Who imports it
//
// pkg/multisite/poller (Ingest, after every successful read of the relay),
// pkg/server (which creates it, follows the topology with SetTopology and
// serves it on /debug/sites), and the site stage. It imports
// pkg/multisite/signals and pkg/multisite/topology, and starts no
// goroutine.
//
// # What it holds
//
// Per site of the topology (and only those: a site that leaves the
// topology is dropped with its rows, so the store is bounded by
// topology.MaxSites sites):
//
//   - per provider (grid_provider, at most MaxProvidersPerSite, 64, per
//     site; rows of further providers are refused as cap), keyed by (site,
//     cluster, provider): the latest reading of each pool gauge (running,
//     queue, ready endpoints, flow-control queue, KV-cache utilisation),
//     of grid_provider_publishes_load and of
//     grid_provider_config_generation, each with its stamp; the
//     provider's load freshness (Provider.Stamp) is the newest stamp of
//     the pool load readings only, never of the publishes_load row (which
//     the relay stamps at every response) or the generation row, which
//     advance Provider.LastHeard instead, and never of a ready endpoints
//     reading of 0 (the row the relay sends alone at the end of a failing
//     scrape's staleMetricsSeconds window, G-08: it says the readiness is
//     gone, not that the other readings are fresh). The generation
//     scopes learning (G-06, G-12): a row with a new generation value
//     starts a new generation (Provider.GenerationSince) and clears the
//     readings stamped before it; without the row learning stays off;
//   - for a peer, the relay's judgement clock (G-41): the end of its last
//     poll round that tried the peer (Site.RoundEnd) and the number of
//     rounds (Site.Rounds; Site.RoundsKnown false: the peer is not judged,
//     G-42).
//
// And for the local site's judgement, the EPP's last successful read of
// its relay: Snapshot.ReadAt (the EPP's clock) and that response's Date
// (the relay's clock, the one the stamps are on).
//
// Each read of the relay is its whole view for grid_provider_publishes_load:
// a provider whose row a read leaves out (a relay restarted during a
// partition that has not heard from the peer since) has PublishesLoad
// reset to unknown, so it is unmeasured until the row comes back (G-47,
// G-49); its other readings stay. The relay never cuts a publishes_load
// row for room (signals.Encode keeps them outside the body's size cut,
// like the round rows), so a truncated target does not make its provider
// unmeasured.
//
// Rows merge: a reading is replaced by a row of its series whose stamp is
// not older; a site's other rows that a body leaves out (a truncated
// target's load and generation rows, a peer the relay cannot reach) keep
// their last value and stamp, which is
// what silence is judged from. A provider whose newest row (LastHeard) is
// older than the latest Date minus MaxAge (24 h) is dropped. Rows of a site the
// topology does not hold, or of a provider whose grid_cluster is not the
// site's cluster, are refused (IngestResult.SiteMismatch; the poller
// counts them as site_mismatch).
//
// # Snapshots
//
// Every Ingest and SetTopology publishes a new *Snapshot with a higher
// Version. A snapshot never changes: sites that did not change share
// their Site values (and Providers slices) with the previous snapshot, so
// a poll that brings rows for one site rebuilds only that site.
package sitestore
