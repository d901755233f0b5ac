// Package sitestage is the request step of seed 000's cross-site site
// selection (§2.12 of seed-requirements.md): for every request, before
// the scheduling profiles run, it chooses the site (a (site, cluster)
// candidate) the request goes to, reading only the latest
// sitestate.Snapshot the learner published (one atomic load; no I/O, no
// lock, fixed-size arrays of at most sitestate.MaxSites, no allocation
// on the routed path).
//
// # The request step
//
//  1. A request that names no model while some site serves only listed
//     models is refused 400 (no_model); a model no site serves, 404
//     (model_not_found, G-64); a shed model, 429 with the OpenAI type
//     rate_limit_exceeded, the code capacity_exhausted and a Retry-After
//     of 3 … 7 s spread by the request counter (G-63).
//  2. Candidates are the sites that serve the model, are routable (the
//     local site, or a remote one with a gateway address) and ready
//     (G-20).
//  3. Silent sites are dropped while a live one remains (G-43); when all
//     are silent they all stay and the pick counts as a fallback (G-45).
//  4. Tiers, best first (G-22): T1 queue-free with room, T2 queued with
//     room, T3 measured and not full, T4 every measured site. A site that
//     does not publish load (unmeasured) is only in T1/T2, never in the
//     overflow tiers T3/T4 (G-48). Below T4 (G-23, §2.11 #15): the
//     fallback set (sites with no telemetry, or unmeasured, reason
//     fallback, drawn by capacity: this is also G-51's known issue), then
//     the last resort (health-demoted sites, G-21: the front candidate,
//     the first by name, G-57). Demoted sites are in no tier. Nothing
//     left: 503 no_healthy_site with Retry-After (G-64).
//  5. The site-level prefix affinity names at most one site of the chosen
//     tier (G-24); the draw uses it only between the two sites it draws.
//     The last resort ignores it (G-57's front candidate).
//  6. The draw (G-30 … G-36): in T1/T2 when every site has fresh rho,
//     lone (one site), between_two (two: capacity/(1+rho), shares clamped
//     to 10 … 90 %), two_choices (three or more: two distinct
//     capacity-weighted draws, the lower rho wins, a tie keeps the
//     first); otherwise, and always in T3/T4, the sites tied on the least
//     queue depth (path queue_tie when the tie removed a site) drawn by
//     capacity (by_capacity). An unknown capacity weighs the mean of the
//     known ones among the sites drawn, all unknown weigh 1 (G-34).
//
// Draws come from a per-request counter mixed with a salt by a 64-bit
// hash (splitmix64; G-37): the salt is random at start (Options.Seed for
// tests), so replicas do not draw in lock-step, and a decision is a pure
// function of (snapshot, model, affinity record, counter, salt), which is
// what lets the tests assert exact distributions.
//
// # Affinity among sites
//
// "The prefix-cache affinity of the request decides among sites as it
// does among pods" is read here as: a site whose model servers were sent
// a prompt's prefix recently holds it in their caches, so a request
// sharing that prefix should go there when the pressure tier allows. The
// stage keeps a bounded record (AffinityOptions.TableBlocks slots, 16384
// by default, one atomic word each: a block hash tag and a site tag) of
// where the leading 256-byte blocks of recent prompts were sent. A
// request hashes its first MaxBlocks whole blocks (chained, as the
// prefix-cache producer chains them); when the record holds a run of at
// least MinRun (4) leading blocks, the site the longest run was sent to
// is the affinity's site, if it is in the tier. It does not narrow the
// tier to that site: two_choices keeps it when it is one of the two sites
// drawn (instead of the lower rho), between_two and by_capacity draw a
// second time and keep it when either draw hits it, lone and the last
// resort ignore it. Narrowing would send every request sharing a long
// system prompt to one site (each pick is recorded, so the site that
// took the first keeps them all) and undo the capacity split; this way
// requests sharing a prefix still spread (three equal sites: about 1/3
// each, the affinity's site 2/3 of the draws while the record stays).
// Affinity never adds a site and never crosses a tier. After the pick
// every block is recorded for the chosen site, so a newer placement
// replaces an older one. The pods' own prefix scorer
// then works inside the site as before.
//
// # Metrics
//
// grid_route_selections_total{path} (Paths) and
// grid_route_decisions_total{site,reason} (Reasons; the refusals shed,
// no_route, model_not_found and no_model with site ""), registered on
// Options.Registerer. Both label sets are closed; site names come from
// the topology (at most 64).
//
// # Who imports it
//
// pkg/extproc (the site step of the request path) and pkg/server (which
// builds the Stage beside the learner's Holder). It imports
// pkg/multisite/sitestate and pkg/scheduling (for Refusal) and starts no
// goroutine.
package sitestage
