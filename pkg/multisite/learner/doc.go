// Package learner is the multi-site control step (seed 000; §2.12 of
// seed-requirements.md): off the request path, after each successful
// poll of the local site-relay and on each health tick, Step reads the
// site store's snapshot (pkg/multisite/sitestore) and the topology and
// publishes one immutable sitestate.Snapshot by atomic swap, which the
// site stage (pkg/multisite/sitestage) reads per request.
//
// # What it learns and judges
//
// Per (site, cluster, provider), in the provider's current generation
// (grid_provider_config_generation; without the row learning is off and
// only the reported pressure is used, a new value restarts it, G-06,
// G-12), from each new sample (a newer load stamp):
//
//   - in-flight = (running + queue) × ready endpoints + flow control (G-05);
//   - soft bound = the most in-flight seen with nothing waiting (less than
//     one whole request queued or held), hard bound = the least in-flight
//     seen with work waiting (G-10, G-11); the soft bound decays toward
//     ceilingFloor and the hard bound doubles every ceilingHalfLifeMs, both
//     on the samples' stamps; ceiling = max(floor, min(soft, hard)) (G-13).
//
// Per site (a site's providers add up: in-flight, bounds and ceilings are
// sums, the reported KV-cache pressure is the worst):
//
//   - rho_counted = in-flight / ceiling (both of the providers with a
//     ceiling only), rho_reported = KV-cache
//     utilisation, rho = max of the two, smoothed with `smoothing` per new
//     sample, the first sample setting it (G-14); RhoFresh when the sample
//     is inside the freshness window by the site's judgement clock;
//   - room = the retained rho < 1 (G-15, §2.11 #16); queued = work waiting;
//     the queue depth is the worst waiting count inside the window (G-36);
//   - full = at the ceiling (the learned providers' in-flight ≥ their
//     ceiling, as for rho_counted) with queueFull requests per ready endpoint
//     waiting (or any flow-control hold) for fullAfterMs, on the stamps
//     (G-16);
//   - weight = the ceiling, lifted to exploreFloor × the largest measured
//     ceiling (G-17); unknown (CapacityKnown false) without a ceiling;
//   - readiness: unready when every reported ready-endpoint count is 0, or
//     when the site is not routable (a remote site without a gateway
//     address is not admitted) (G-20); demotion from Health (G-21);
//   - publishes-load: a provider's grid_provider_publishes_load row is 1
//     (G-47 … G-49); Telemetry: some load row was ever received (G-23).
//
// # Silence
//
// A site is judged on the relay's clock: the local site at the Date of
// the EPP's last read of its relay, a peer at the end of the relay's last
// poll round that tried it; a peer whose relay reports no rounds is not
// judged (G-41, G-42). It is silent when its newest load stamp is more
// than the freshness window before that clock (G-40), or, for a peer that
// publishes load and never sent a load row, when the window has passed
// since the first round end the learner saw (G-46). Silence is sticky: it
// clears after two new samples with no full window between them (a
// streak, §2.11 #4; a duplicate stamp is no sample, G-44). A failing
// scrape keeps publishes_load 1 and goes silent (G-50). The known issue of
// G-51 is kept: a peer provider with no load rows is live, unmeasured and
// without telemetry, which the site stage takes as the fallback when
// every load-publishing site is silent.
//
// # Shedding
//
// With `shedding` on, a model sheds once every counted site serving it
// (ready, live, publishing load, with telemetry, not demoted: silent and
// unmeasured sites never hold it off, G-43, G-48) is full, and at least
// one is (G-61); it routes again once one of them has had no sample at the
// limit for roomAfterMs, or at once when its queue empties (nothing
// queued and nothing held by flow control: a fraction of a request
// waiting is not empty, G-62); in between the state is kept. The models no site names (served only by
// sites with an empty model list) shed together as OtherModels
// (Snapshot.ShedOthers).
//
// # Settings and metrics
//
// Settings is the `availability` block of the EPP configuration
// (camelCase keys; see its comment for the seed's snake_case names).
// Metrics are the grid_route_site_* gauges per (site, cluster), NaN without
// a reading and NaN (not deleted) for a site that left the topology, and
// grid_route_shedding{model}. DebugOf is the /debug/sites view of a
// snapshot (stable JSON names, null for no reading, and each site's own
// tier class, TierOf, by the site stage's rule: a test holds the two
// together).
//
// # Who imports it
//
// pkg/server (which runs Step from its multi-site loop and serves the
// snapshot on /debug/sites), cmd/epp's demo and tests. It imports
// sitestate, sitestore and topology (its tests sitestage too), and starts
// no goroutine.
package learner
