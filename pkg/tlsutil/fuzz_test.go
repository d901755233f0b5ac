package tlsutil

import (
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzLoadPair: arbitrary file contents never panic; an error names a
// file; a success has a parsed leaf.
func FuzzLoadPair(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), []byte("-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte(""), []byte(""))
	f.Add([]byte("-----BEGIN EC PRIVATE KEY-----\n\n-----END EC PRIVATE KEY-----\n"), []byte("-----BEGIN RSA PRIVATE KEY-----\nAA==\n-----END RSA PRIVATE KEY-----\n"))
	// Real pairs are generated here rather than committed, so that no
	// private key sits in the repository (secret scanners flag them).
	a, errA := SelfSigned([]string{"seed.example"}, time.Hour)
	b, errB := SelfSigned(nil, time.Hour)
	if errA != nil || errB != nil {
		f.Fatal(errA, errB)
	}
	certA, keyA := pemPair(f, a)
	_, keyB := pemPair(f, b)
	f.Add(certA, keyA)                                                                // valid
	f.Add(certA, keyB)                                                                // mismatched
	f.Add(keyA, certA)                                                                // files swapped
	f.Add(append(certA[:len(certA)/2:len(certA)/2], certA[len(certA)/2+4:]...), keyA) // cut certificate
	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		c, err := loadPair(certPEM, keyPEM, "dir/tls.crt", "dir/tls.key")
		if err != nil {
			if !strings.Contains(err.Error(), "dir/tls.") {
				t.Fatalf("error does not name a file: %v", err)
			}
			return
		}
		if c.Leaf == nil {
			t.Fatal("loaded pair without a leaf")
		}
	})
}

// FuzzParseHosts: arbitrary host lists never panic, and accepted DNS names
// are ASCII (x509 requires IA5String).
func FuzzParseHosts(f *testing.F) {
	for _, s := range []string{"localhost,127.0.0.1,::1", "*.example.com", "a..b", "host:1,é", "", ",", "-x-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		dns, _, err := parseHosts(strings.Split(list, ","))
		if err != nil {
			return
		}
		for _, d := range dns {
			for i := 0; i < len(d); i++ {
				if d[i] >= 0x80 || d[i] <= ' ' {
					t.Fatalf("accepted %q", d)
				}
			}
		}
	})
}

// FuzzIdentity: arbitrary SPIFFE IDs and pins never panic; an accepted
// SPIFFE ID is a canonical URI that matches a certificate carrying it;
// an accepted pin is 32 bytes whatever its spelling; Canonical is
// idempotent and Overlaps symmetric and reflexive.
func FuzzIdentity(f *testing.F) {
	for _, s := range []string{"spiffe://example.org/site/a", "spiffe://a/b/../c", "spiffe://EX/x", "spiffe://x/y?z", "spiffe://x/%2F", "AB:cd:" + strings.Repeat("00", 30), strings.Repeat("f", 64), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := ValidateSPIFFEID(s); err == nil {
			u, err := url.Parse(s)
			if err != nil || u.String() != s || u.Scheme != "spiffe" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Port() != "" {
				t.Fatalf("accepted %q: %v %+v", s, err, u)
			}
			if !(Identity{SPIFFEID: s}).Match(&x509.Certificate{URIs: []*url.URL{u}}) {
				t.Fatalf("accepted %q does not match a certificate carrying it", s)
			}
		}
		if _, err := ParsePin(s); err == nil && len(normalizePin(s)) != 64 {
			t.Fatalf("accepted pin %q", s)
		}
		_ = Identity{SPIFFEID: s, SHA256: s}.Validate()

		// Canonical is idempotent, leaves a valid SPIFFE ID as it is, and
		// Overlaps is symmetric and reflexive for a non-zero identity.
		for _, id := range []Identity{{SPIFFEID: s}, {SHA256: s}, {SPIFFEID: s, SHA256: s}} {
			c := id.Canonical()
			if c.Canonical() != c {
				t.Fatalf("Canonical(%+v) = %+v is not canonical", id, c)
			}
			if !c.IsZero() && !id.Overlaps(id) {
				t.Fatalf("%+v does not overlap itself", id)
			}
			other := Identity{SPIFFEID: "spiffe://example.org/site/a", SHA256: strings.Repeat("ab", 32)}
			if id.Overlaps(other) != other.Overlaps(id) {
				t.Fatalf("Overlaps is not symmetric for %+v", id)
			}
		}
		if ValidateSPIFFEID(s) == nil && (Identity{SPIFFEID: s}).Canonical().SPIFFEID != s {
			t.Fatalf("a valid SPIFFE ID %q is changed by Canonical", s)
		}
	})
}
