package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"time"
)

// DefaultSelfSignedValidity is GIE's lifetime for its self-signed
// certificate (10 years).
const DefaultSelfSignedValidity = 10 * 365 * 24 * time.Hour

// SelfSigned returns a self-signed ECDSA P-256 server certificate valid
// for validFor from now (backdated one minute for clock skew). Its subject
// alternative names are localhost, 127.0.0.1, ::1, the host name of this
// machine and hosts (DNS names, wildcards such as *.example.com, or IP
// addresses). The returned certificate has Leaf set.
func SelfSigned(hosts []string, validFor time.Duration) (tls.Certificate, error) {
	if validFor <= 0 {
		return tls.Certificate{}, fmt.Errorf("tlsutil: self-signed certificate validity must be positive, got %v", validFor)
	}
	all := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && validHostname(h) == nil {
		all = append(all, h)
	}
	dns, ips, err := parseHosts(append(all, hosts...))
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tlsutil: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tlsutil: serial number: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "switchyard-epp", Organization: []string{"Switchyard"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tlsutil: create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tlsutil: parse created certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// parseHosts splits hosts into DNS names and IP addresses, dropping
// duplicates; an invalid entry is an error naming it.
func parseHosts(hosts []string) (dns []string, ips []net.IP, err error) {
	seen := make(map[string]bool, len(hosts))
	for i, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if k := ip.String(); !seen[k] {
				seen[k] = true
				ips = append(ips, ip)
			}
			continue
		}
		if err := validHostname(h); err != nil {
			return nil, nil, fmt.Errorf("tlsutil: host %d %q: %w", i, h, err)
		}
		if k := strings.ToLower(h); !seen[k] {
			seen[k] = true
			dns = append(dns, k)
		}
	}
	return dns, ips, nil
}

// validHostname accepts DNS names (RFC 1123 labels; a leading "*." label
// for wildcards).
func validHostname(h string) error {
	switch {
	case h == "":
		return fmt.Errorf("empty host name")
	case len(h) > 253:
		return fmt.Errorf("host name longer than 253 bytes")
	}
	name := strings.TrimSuffix(strings.TrimPrefix(h, "*."), ".")
	if name == "" {
		return fmt.Errorf("wildcard without a domain")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("label %q must be 1 to 63 bytes", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q must not start or end with '-'", label)
		}
		for j := 0; j < len(label); j++ {
			c := label[j]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("invalid character %q (want letters, digits, '-', IP addresses without ports)", c)
			}
		}
	}
	return nil
}
