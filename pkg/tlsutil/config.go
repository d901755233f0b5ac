package tlsutil

import "crypto/tls"

// ServerConfig returns the server tls.Config of the ext_proc listener:
// certificates from getCert (Reloader.GetCertificate or Static), TLS 1.2 or
// later, and ALPN "h2" (gRPC), as GIE configures it. A nil getCert makes
// every handshake fail with "no certificates configured".
func ServerConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2"},
		GetCertificate: getCert,
	}
}

// Static returns a GetCertificate function that always serves cert (for a
// SelfSigned certificate, or --cert-path without reloading).
func Static(cert tls.Certificate) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := &cert
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c, nil }
}
