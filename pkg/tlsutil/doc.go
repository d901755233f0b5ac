// Package tlsutil provides TLS for the ext_proc gRPC server, matching GIE's
// --secure-serving, --cert-path and --enable-cert-reload flags:
//
//   - SelfSigned makes the certificate used when --secure-serving is on and
//     no --cert-path is given.
//   - Reloader loads tls.crt and tls.key from --cert-path and, when Run is
//     started (--enable-cert-reload), follows changes to them.
//   - ServerConfig builds the server tls.Config (TLS 1.2 or later, ALPN h2).
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
// both files; it also re-reads them every minute in case an event was
// missed. A pair that does not load (unreadable file, bad PEM, key not
// matching the certificate) is refused with an error log line and the
// current certificate keeps being served; the same broken pair is reported
// once. New handshakes get the new certificate; open connections keep
// theirs.
//
// # Metrics
//
// With the WithRegisterer option, NewReloader registers
// switchyard_tls_certificate_reloads_total{result="success|failure"} and
// switchyard_tls_certificate_expiry_timestamp_seconds (NotAfter of the
// certificate being served, as Unix seconds).
package tlsutil
