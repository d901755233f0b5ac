// Package poller is the EPP's poller of its local site-relay: every
// interval (500 ms by default) it GETs the relay's /v1/site/signals over
// mutual TLS and ingests what the relay relays — every site's load, each
// row tagged by the relay with the site it verified — into the site store
// (pkg/multisite/sitestore).
//
// # Who imports it
//
// pkg/server, which builds it from the --signals-* flags and runs it as
// one of Server.Run's loops. It imports pkg/multisite/signals (the wire
// format), sitestore, topology and pkg/tlsutil (the identity check).
//
// # The poll (G-04, G-70, G-72 … G-76)
//
// The poller knows one URL, its own site's relay, and follows no redirect
// (G-04). The TLS configuration presents the EPP's client certificate and
// checks the relay's certificate in the handshake: its chain against the
// CA bundle and its identity (SPIFFE ID or SHA-256 pin, pkg/tlsutil). Each
// poll ends in one result of grid_signals_poll_total{result}:
//
//	ok            200, a Date header, a body within 1 MiB: ingested
//	unreachable   dial, timeout or read failure, or a status other than
//	              200/401/403 (a redirect included)
//	unauthorized  a TLS alert from the relay (our certificate refused), 401, 403
//	too_large     a body over 1 MiB (G-70), announced or read: nothing ingested
//	no_date       the Date header missing or unparsable: nothing ingested
//	bad_identity  the relay's certificate is not the expected identity, or
//	              not signed by the CA bundle, or missing
//
// At most 1 MiB (plus one byte, to tell) is read; headers are bounded to
// 64 KiB and the whole poll, dial included, by the timeout (2 s).
// grid_signals_last_success_timestamp_seconds is the EPP's Unix time of
// the last ok poll and grid_signals_response_bytes the size of that body
// (G-73).
//
// Rows are judged by signals.Parse against the response's Date, so the
// sites' clocks never need to agree (G-75: a row stamped more than 1 s
// after the Date or more than 24 h before it is skew); rows of a site the
// topology does not know, or of a cluster that is not the site's, are
// site_mismatch (the EPP side of G-02/G-03); beyond 64 providers per site
// or 4096 rows per target, cap; malformed, parse. Every refused row is
// counted in grid_signals_ingest_dropped_total{reason} (G-74); the rest
// is ingested and the store publishes a new snapshot, with the EPP's read
// time as the local site's judgement clock (G-41); then Options.OnIngest,
// when set, is called (the EPP runs its multi-site control step on it).
//
// The poller logs one line when polling starts failing and one when it
// recovers (G-76); in between, failures are logged at V(1) only. A poll
// that the end of Run's context cuts short (shutdown) is no failure of
// the relay: it is logged at V(1), counted nowhere and leaves Status as it
// was (Poll returns Abandoned).
// Status reports the last poll for /debug/sites.
//
// # Goroutines
//
// Run polls on its caller's goroutine until its context ends and closes
// its idle connection when it returns. Poll is one poll (tests call it).
package poller
