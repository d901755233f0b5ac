// Package gwhealth probes the gateways of the remote sites of the
// multi-site topology (seed 000, G-55 … G-57): every 3 s each remote
// site's gateway (its host:port in the topology, nothing else) gets a
// probe, a TCP connect within 1 s by default (Options.Probe replaces
// it). The probe is a plain TCP connect, no TLS handshake: it proves the
// gateway accepts connections, not that it serves. Gateways are literal
// ip:port (topology.Parse refuses host names, which the data plane
// cannot route to; the default probe fails one without a lookup). A
// gateway starts pending (down), is up after 2 consecutive passes (G-56) and down again after 2 consecutive failures: symmetric,
// so one lost probe neither demotes an up gateway nor brings a down one
// back, and a dead gateway is demoted within two rounds (about 6 s, the
// default freshness window of the signals). A gateway whose address
// changes starts pending again. A gateway that has not come up after 2
// failures in a row is logged once at V(0), as is one that goes down.
//
// The Prober publishes an immutable View by atomic swap after each round;
// Demoted(site, gateway) is what the learner (the control step) reads,
// with the topology's current address, to set sitestate.Site.Demoted,
// which makes the site stage use the site only as a last resort (G-21).
// It is true unless the latest round found that very address up: a site
// not yet probed, or whose gateway just moved, takes no traffic until
// the address passed 2 probes (G-56). A site returning from a partition is routed
// again once its signals are back and its gateway passed 2 probes,
// whichever is later (G-55): the two are independent inputs of the
// snapshot.
//
// grid_route_gateway_up{site} is 1 while up, 0 while not, NaN after the
// site left the topology.
//
// # Goroutines
//
// Run is owned by pkg/server's Run (one loop); each round starts one
// goroutine per gateway (at most MaxTargets) and waits for all of them,
// each bounded by the probe timeout, so nothing outlives Run.
package gwhealth
