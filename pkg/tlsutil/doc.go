// Package tlsutil provides TLS for the ext_proc gRPC server, matching GIE's
// --secure-serving, --cert-path and --enable-cert-reload flags, and the
// mutual TLS of the multi-site signal path (site-relays and the EPP's
// poller of its relay):
//
//   - SelfSigned makes the certificate used when --secure-serving is on and
//     no --cert-path is given.
//   - Reloader loads tls.crt and tls.key from --cert-path (NewReloader) or
//     from two paths (NewFileReloader) and, when Run is started
//     (--enable-cert-reload), follows changes to them; it serves them as a
//     server certificate (GetCertificate) or a client certificate
//     (GetClientCertificate).
//   - CABundle loads a PEM file of CA certificates and follows changes to
//     it the same way (Pool).
//   - ServerConfig builds the ext_proc server tls.Config (TLS 1.2 or
//     later, ALPN h2); MutualServerConfig and ClientConfig the two ends of
//     mutual TLS.
//   - Identity, PeerVerifier and VerifyPeer check who the peer is (see
//     Identity). Tests make certificates with the tlstest subpackage.
//
// pkg/server (the serve command) and pkg/multisite (the site-relay and the
// EPP's signals poller) import it.
//
// # Key type
//
// GIE generates an RSA 4096 key at start, which costs from a few hundred
// milliseconds to seconds of CPU on every pod start. SelfSigned uses ECDSA
// P-256 instead: generation takes microseconds, handshakes are cheaper, and
// every proxy that talks to an EPP (Envoy, and the gateways built on it)
// accepts ECDSA server certificates. Proxies usually do not verify this
// certificate (GIE's chart configures them to skip verification); when
// they do, they must trust the certificate itself.
//
// # Reloading
//
// Kubernetes updates a mounted Secret by writing a new timestamped
// directory and atomically renaming a "..data" symlink; cert-manager csi
// drivers and hand-made setups rename files into place. Run watches the
// directory with fsnotify, waits for events to settle (100 ms), then reads
// both files (a CABundle its one file); it also re-reads them every minute
// in case an event was missed. A pair that does not load (unreadable file, bad PEM, key not
// matching the certificate) is refused with an error log line and the
// current certificate keeps being served; the same broken pair is reported
// once. New handshakes get the new certificate; open connections keep
// theirs.
//
// # Identity
//
// A peer is identified by its leaf certificate, never by a host name or by
// what it says in a body: either its SPIFFE ID (the certificate's only URI
// SAN, spiffe://<trust domain>/site/<name> for site-relays, as in an
// X.509-SVID) or a pinned SHA-256 of the certificate's DER encoding, or
// both. When a CA bundle is configured the chain must also verify against
// it (for client or server authentication, host names not checked); a
// SPIFFE ID without a CA bundle proves nothing, so callers require one
// (pins hold on their own, e.g. for self-signed certificates).
// PeerVerifier.Verify returns which of the accepted identities the peer
// proved, so one server can tell its clients apart, and refuses with a
// *PeerError (no_certificate, untrusted, wrong_identity, expired: a leaf
// pinned without a CA bundle is still held to its validity period, on the
// verifier's clock, PeerVerifier.Now). A client checks
// its server in the handshake (ClientConfig with VerifyPeer): the error it
// gets is the *PeerError. A server that wants refused clients to know why
// checks in its handler and answers 403 (see VerifyPeer). Identities
// compare in Identity.Canonical form (pins in any case, with or without
// colons; SPIFFE IDs with the trust domain lower-cased, no trailing
// slash); Identity.Overlaps reports two that one certificate could prove
// both of, which a configuration that must tell clients apart refuses.
//
// # Metrics
//
// With the WithRegisterer option, NewReloader registers
// switchyard_tls_certificate_reloads_total{purpose,result="success|failure"}
// and switchyard_tls_certificate_expiry_timestamp_seconds{purpose}
// (NotAfter of the certificate in use, as Unix seconds), and NewCABundle
// switchyard_tls_ca_bundle_reloads_total{purpose,result="success|failure"}.
// The purpose (WithPurpose, a closed set: serving, the default;
// relay_server; signals_client) tells apart the certificates of one
// process on one registry; use each once per registry.
package tlsutil
