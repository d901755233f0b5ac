// Package tlstest makes certificates for tests: a CA (NewCA) that issues
// ECDSA P-256 leaf certificates carrying a SPIFFE URI SAN and the
// loopback names (127.0.0.1, ::1, localhost, plus any addresses asked
// for), valid for both server and client authentication, and writes them
// as PEM files. Like net/http/httptest it is meant for tests only; the
// private keys it makes are never written outside the test's directories.
//
// Any package's tests may import it; it imports pkg/tlsutil and the
// standard library.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// TrustDomain is the SPIFFE trust domain of SiteLeaf.
const TrustDomain = "switchyard.test"

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // the CA certificate, PEM
}

// NewCA returns a new self-signed CA named name, valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Switchyard tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: create CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: parse CA: %v", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool returns a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteFile writes the CA certificate to dir/ca.crt and returns the path.
func (ca *CA) WriteFile(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ca.crt")
	writeFile(t, path, ca.PEM)
	return path
}

// Leaf is an issued certificate.
type Leaf struct {
	TLS      tls.Certificate // with Leaf set
	CertPEM  []byte
	KeyPEM   []byte
	SPIFFEID string // "" when issued without one
	SHA256   string // tlsutil.Fingerprint of the certificate
}

// Identity returns the identity the leaf proves by its SPIFFE ID.
func (l *Leaf) Identity() tlsutil.Identity { return tlsutil.Identity{SPIFFEID: l.SPIFFEID} }

// Pin returns the identity the leaf proves by its SHA-256.
func (l *Leaf) Pin() tlsutil.Identity { return tlsutil.Identity{SHA256: l.SHA256} }

// WriteFiles writes dir/tls.crt and dir/tls.key (the layout of a
// kubernetes.io/tls Secret and of tlsutil.NewReloader) and returns their
// paths.
func (l *Leaf) WriteFiles(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, tlsutil.CertFile), filepath.Join(dir, tlsutil.KeyFile)
	writeFile(t, certFile, l.CertPEM)
	writeFile(t, keyFile, l.KeyPEM)
	return certFile, keyFile
}

// Issue returns a leaf certificate with spiffeID as its URI SAN (none
// when empty) and the loopback names plus hosts (IP addresses or DNS
// names) as its other SANs, valid for a day for server and client
// authentication.
func (ca *CA) Issue(t testing.TB, spiffeID string, hosts ...string) *Leaf {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "switchyard-test-leaf"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if spiffeID != "" {
		u, err := url.Parse(spiffeID)
		if err != nil {
			t.Fatalf("tlstest: SPIFFE ID %q: %v", spiffeID, err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatalf("tlstest: issue: %v", err)
	}
	return newLeaf(t, der, key, spiffeID)
}

// SiteLeaf issues the certificate of a site-relay (or of any party named
// site): SPIFFE ID spiffe://switchyard.test/site/<site>.
func (ca *CA) SiteLeaf(t testing.TB, site string, hosts ...string) *Leaf {
	t.Helper()
	return ca.Issue(t, tlsutil.SiteSPIFFEID(TrustDomain, site), hosts...)
}

// SelfSigned returns a self-signed leaf with spiffeID (a certificate no CA
// vouches for, to be pinned by its SHA-256).
func SelfSigned(t testing.TB, spiffeID string) *Leaf {
	t.Helper()
	ca := NewCA(t, "self")
	l := ca.Issue(t, spiffeID)
	// Re-issue signed by its own key: a leaf that is its own issuer.
	tmpl := *l.TLS.Leaf
	key := l.TLS.PrivateKey.(*ecdsa.PrivateKey)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: self-sign: %v", err)
	}
	return newLeaf(t, der, key, spiffeID)
}

// SelfSignedBetween is SelfSigned valid from notBefore to notAfter only
// (an expired or not yet valid certificate, for validity checks).
func SelfSignedBetween(t testing.TB, spiffeID string, notBefore, notAfter time.Time) *Leaf {
	t.Helper()
	l := SelfSigned(t, spiffeID)
	tmpl := *l.TLS.Leaf
	tmpl.NotBefore, tmpl.NotAfter = notBefore, notAfter
	key := l.TLS.PrivateKey.(*ecdsa.PrivateKey)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: self-sign: %v", err)
	}
	return newLeaf(t, der, key, spiffeID)
}

func newLeaf(t testing.TB, der []byte, key *ecdsa.PrivateKey, spiffeID string) *Leaf {
	t.Helper()
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: parse leaf: %v", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: marshal key: %v", err)
	}
	return &Leaf{
		TLS:      tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		SPIFFEID: spiffeID,
		SHA256:   tlsutil.Fingerprint(der),
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: generate key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("tlstest: serial: %v", err)
	}
	return n
}

// writeFile writes data through a temporary file and a rename, so that a
// watcher never reads half a file.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
}
