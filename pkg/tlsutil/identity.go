package tlsutil

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Identity is what a peer's leaf certificate must prove: a SPIFFE ID (the
// certificate's one URI SAN, as in an X.509-SVID), a pinned SHA-256 of the
// leaf certificate (DER), or both (then both must hold). A SPIFFE ID is
// only as good as the CA that signed it: use it together with a CA bundle;
// a pin holds on its own (a self-signed peer certificate can be pinned).
type Identity struct {
	// SPIFFEID is the expected URI SAN, e.g. spiffe://example.org/site/a.
	SPIFFEID string `json:"spiffeID,omitempty"`
	// SHA256 is the hex SHA-256 of the leaf certificate's DER encoding,
	// in either case, optionally with ':' between bytes (the openssl
	// x509 -fingerprint -sha256 output).
	SHA256 string `json:"sha256,omitempty"`
}

// IsZero reports whether id expects nothing.
func (id Identity) IsZero() bool { return id.SPIFFEID == "" && id.SHA256 == "" }

// String returns the identity for logs and messages.
func (id Identity) String() string {
	switch {
	case id.SPIFFEID != "" && id.SHA256 != "":
		return id.SPIFFEID + " (sha256 " + normalizePin(id.SHA256) + ")"
	case id.SPIFFEID != "":
		return id.SPIFFEID
	case id.SHA256 != "":
		return "sha256 " + normalizePin(id.SHA256)
	}
	return "(none)"
}

// Validate reports a malformed SPIFFE ID or pin, or an empty identity.
// Each error starts with the field's JSON key.
func (id Identity) Validate() error {
	if id.IsZero() {
		return errors.New("one of spiffeID or sha256 is required")
	}
	var errs []error
	if id.SPIFFEID != "" {
		if err := ValidateSPIFFEID(id.SPIFFEID); err != nil {
			errs = append(errs, fmt.Errorf("spiffeID: %w", err))
		}
	}
	if id.SHA256 != "" {
		if _, err := ParsePin(id.SHA256); err != nil {
			errs = append(errs, fmt.Errorf("sha256: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Canonical returns id in the form comparisons use: the pin as 64
// lowercase hex digits without ':' (any case and colons accepted), the
// SPIFFE ID as parsed, with its scheme and trust domain lower-cased and no
// trailing '/'. A value that does not parse is only trimmed.
func (id Identity) Canonical() Identity {
	out := Identity{SPIFFEID: strings.TrimSpace(id.SPIFFEID), SHA256: strings.TrimSpace(id.SHA256)}
	if out.SHA256 != "" {
		if pin, err := ParsePin(out.SHA256); err == nil {
			out.SHA256 = hex.EncodeToString(pin[:])
		}
	}
	if out.SPIFFEID != "" {
		if u, err := url.Parse(out.SPIFFEID); err == nil && u.Host != "" {
			out.SPIFFEID = strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + strings.TrimRight(u.EscapedPath(), "/")
		}
	}
	return out
}

// Overlaps reports whether one certificate could prove both id and other,
// so a verifier could not tell them apart: they set a component in common
// (SPIFFE ID or pin), and every component both set is equal (compared in
// Canonical form). An identity with only a SPIFFE ID and one with only a
// pin do not overlap (nothing in the configuration ties them), nor does a
// zero identity.
func (id Identity) Overlaps(other Identity) bool {
	a, b := id.Canonical(), other.Canonical()
	common := false
	if a.SPIFFEID != "" && b.SPIFFEID != "" {
		if a.SPIFFEID != b.SPIFFEID {
			return false
		}
		common = true
	}
	if a.SHA256 != "" && b.SHA256 != "" {
		if a.SHA256 != b.SHA256 {
			return false
		}
		common = true
	}
	return common
}

// Match reports whether leaf proves id: its only URI SAN equals SPIFFEID
// (when set) and its SHA-256 equals the pin (when set). An empty identity
// matches nothing.
func (id Identity) Match(leaf *x509.Certificate) bool {
	if leaf == nil || id.IsZero() {
		return false
	}
	if id.SPIFFEID != "" {
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id.SPIFFEID {
			return false
		}
	}
	if id.SHA256 != "" {
		pin, err := ParsePin(id.SHA256)
		if err != nil || pin != sha256.Sum256(leaf.Raw) {
			return false
		}
	}
	return true
}

// SiteSPIFFEID returns spiffe://<trustDomain>/site/<site>, the SPIFFE ID
// convention of site-relays.
func SiteSPIFFEID(trustDomain, site string) string {
	return "spiffe://" + trustDomain + "/site/" + site
}

// maxSPIFFEIDBytes is the SPIFFE ID length limit of the standard.
const maxSPIFFEIDBytes = 2048

// ValidateSPIFFEID checks s against the SPIFFE ID standard:
// spiffe://<trust domain>/<path>, the trust domain of lowercase letters,
// digits, '.', '-' and '_', the path of non-empty segments of letters,
// digits, '.', '-' and '_' (not "." or ".."), no port, user, query or
// fragment, at most 2048 bytes.
func ValidateSPIFFEID(s string) error {
	if len(s) > maxSPIFFEIDBytes {
		return fmt.Errorf("longer than %d bytes", maxSPIFFEIDBytes)
	}
	rest, ok := strings.CutPrefix(s, "spiffe://")
	if !ok {
		return fmt.Errorf("%q must start with spiffe://", s)
	}
	td, path, _ := strings.Cut(rest, "/")
	if td == "" {
		return fmt.Errorf("%q has no trust domain", s)
	}
	for i := 0; i < len(td); i++ {
		c := td[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("%q: trust domain may hold only lowercase letters, digits, '.', '-' and '_'", s)
		}
	}
	if path == "" {
		return fmt.Errorf("%q has no path (a workload ID such as /site/<name> is expected)", s)
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%q: path segments must be non-empty and not '.' or '..'", s)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
				return fmt.Errorf("%q: path may hold only letters, digits, '.', '-', '_' and '/'", s)
			}
		}
	}
	// The checks above leave no room for a port, user, query or fragment;
	// make sure the URL form is what x509 puts in the certificate.
	if u, err := url.Parse(s); err != nil || u.String() != s {
		return fmt.Errorf("%q is not a canonical URI", s)
	}
	return nil
}

// ParsePin parses a hex SHA-256 (64 hex digits, any case, optionally with
// ':' between bytes).
func ParsePin(s string) ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	h := normalizePin(s)
	if len(h) != 2*sha256.Size {
		return out, fmt.Errorf("want 64 hex digits (SHA-256), got %d characters", len(h))
	}
	if _, err := hex.Decode(out[:], []byte(h)); err != nil {
		return out, fmt.Errorf("not hex: %w", err)
	}
	return out, nil
}

func normalizePin(s string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), ":", ""))
}

// Fingerprint returns the lowercase hex SHA-256 of a certificate's DER
// encoding: the pin that Identity.SHA256 expects.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// Reasons of a PeerError.
const (
	PeerNoCertificate = "no_certificate" // the peer sent no certificate
	PeerUntrusted     = "untrusted"      // the chain does not verify against the CA bundle
	PeerWrongIdentity = "wrong_identity" // a valid chain, but not the expected identity
	PeerExpired       = "expired"        // a pinned leaf outside its NotBefore..NotAfter
)

// PeerError is a peer certificate that does not prove the expected
// identity. The EPP's poller counts any PeerError as bad_identity, the
// relay as grid_peer_poll_total{outcome="bad_identity"}.
type PeerError struct {
	Reason string     // PeerNoCertificate, PeerUntrusted, PeerWrongIdentity or PeerExpired
	Want   []Identity // the accepted identities
	Got    string     // what the leaf presented (URI SANs and SHA-256)
	Err    error      // the chain verification error (PeerUntrusted)
}

func (e *PeerError) Error() string {
	want := make([]string, len(e.Want))
	for i, id := range e.Want {
		want[i] = id.String()
	}
	w := strings.Join(want, " or ")
	switch e.Reason {
	case PeerNoCertificate:
		return "tlsutil: peer sent no certificate (want " + w + ")"
	case PeerUntrusted:
		return fmt.Sprintf("tlsutil: peer certificate %s is not signed by the CA bundle: %v", e.Got, e.Err)
	case PeerExpired:
		return fmt.Sprintf("tlsutil: peer certificate %s: %v", e.Got, e.Err)
	}
	return fmt.Sprintf("tlsutil: peer identity %s is not the expected %s", e.Got, w)
}

func (e *PeerError) Unwrap() error { return e.Err }

// IsPeerError reports whether err is (or wraps) a *PeerError.
func IsPeerError(err error) bool {
	var pe *PeerError
	return errors.As(err, &pe)
}

// describe names what leaf presents, for PeerError.Got.
func describe(leaf *x509.Certificate) string {
	uris := make([]string, len(leaf.URIs))
	for i, u := range leaf.URIs {
		uris[i] = u.String()
	}
	s := "sha256 " + Fingerprint(leaf.Raw)
	if len(uris) > 0 {
		s = "[" + strings.Join(uris, " ") + "] " + s
	}
	return s
}

// PeerVerifier checks a peer's certificate chain: when Roots is set and
// returns a pool, the chain must verify against it for Usage
// (x509.ExtKeyUsageServerAuth when checking a server,
// ExtKeyUsageClientAuth when checking a client), and the leaf must match
// one of Accept. Host names are not checked: the identity is. Roots is
// called on every check, so a reloaded CA bundle (CABundle.Pool) applies
// to new connections. Without a pool (identities pinned by SHA-256 only)
// the leaf must still be inside its validity period (NotBefore..NotAfter)
// at Now: a pin does not outlive the certificate.
type PeerVerifier struct {
	Accept []Identity
	Roots  func() *x509.CertPool
	Usage  x509.ExtKeyUsage
	// Now is the verifier's clock, for the chain's and the pinned leaf's
	// validity; time.Now when nil.
	Now func() time.Time
}

// Verify checks certs (leaf first, as tls.ConnectionState.PeerCertificates)
// and returns the index in Accept of the identity the leaf proves. Every
// refusal is a *PeerError.
func (v PeerVerifier) Verify(certs []*x509.Certificate) (int, error) {
	if len(certs) == 0 {
		return -1, &PeerError{Reason: PeerNoCertificate, Want: v.Accept}
	}
	leaf := certs[0]
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	at := now()
	var pool *x509.CertPool
	if v.Roots != nil {
		pool = v.Roots()
	}
	if pool == nil {
		// No chain to verify: the leaf's own validity period still holds.
		if at.Before(leaf.NotBefore) || at.After(leaf.NotAfter) {
			err := fmt.Errorf("not valid at %s (valid from %s to %s)", at.UTC().Format(time.RFC3339), leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
			return -1, &PeerError{Reason: PeerExpired, Want: v.Accept, Got: describe(leaf), Err: err}
		}
	} else {
		var inter *x509.CertPool
		if len(certs) > 1 {
			inter = x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{v.Usage}, CurrentTime: at}); err != nil {
			return -1, &PeerError{Reason: PeerUntrusted, Want: v.Accept, Got: describe(leaf), Err: err}
		}
	}
	if i := MatchIdentity(leaf, v.Accept); i >= 0 {
		return i, nil
	}
	return -1, &PeerError{Reason: PeerWrongIdentity, Want: v.Accept, Got: describe(leaf)}
}

// VerifyConnection is Verify as a tls.Config.VerifyConnection function
// (which, unlike VerifyPeerCertificate, also runs on resumed sessions).
func (v PeerVerifier) VerifyConnection(cs tls.ConnectionState) error {
	_, err := v.Verify(cs.PeerCertificates)
	return err
}

// VerifyPeer returns a tls.Config.VerifyConnection function accepting a
// peer that proves one of accept (see PeerVerifier).
//
// A client should check its server this way: the handshake then fails
// with the *PeerError. A server may too, but with TLS 1.3 the client
// learns of the refusal only after its handshake has completed, as a
// broken connection it cannot tell from a network failure; a server that
// wants its refused clients to know why (to count "unauthorized") should
// accept any client certificate in the handshake (MutualServerConfig with
// a nil verify) and answer 403 from its handler when PeerVerifier.Verify
// refuses r.TLS.PeerCertificates, serving nothing before that check.
func VerifyPeer(accept []Identity, roots func() *x509.CertPool, usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
	return PeerVerifier{Accept: append([]Identity(nil), accept...), Roots: roots, Usage: usage}.VerifyConnection
}

// MatchIdentity returns the index in ids of the first identity leaf
// matches, or -1.
func MatchIdentity(leaf *x509.Certificate, ids []Identity) int {
	for i, id := range ids {
		if id.Match(leaf) {
			return i
		}
	}
	return -1
}

// ClientConfig returns the tls.Config of a mutual-TLS client: the client
// certificate from getClientCert (Reloader.GetClientCertificate), the
// peer checked by verify (VerifyPeer) instead of the host-name check,
// serverName sent as SNI, TLS 1.2 or later.
func ClientConfig(serverName string, getClientCert func(*tls.CertificateRequestInfo) (*tls.Certificate, error), verify func(tls.ConnectionState) error) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		ServerName:           serverName,
		GetClientCertificate: getClientCert,
		// The chain and identity are checked by verify, against the
		// configured CA bundle and identity rather than the system roots
		// and a host name.
		InsecureSkipVerify: true, //nolint:gosec // verify checks the peer
		VerifyConnection:   verify,
	}
}

// MutualServerConfig returns the tls.Config of a server that requires a
// client certificate (proof of its private key) and checks it with verify
// (VerifyPeer) when verify is non-nil; with a nil verify the handler must
// check r.TLS.PeerCertificates (PeerVerifier.Verify) before serving
// anything. It serves certificates from getCert, HTTP/2 and HTTP/1.1, TLS
// 1.2 or later.
func MutualServerConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), verify func(tls.ConnectionState) error) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS12,
		NextProtos:       []string{"h2", "http/1.1"},
		GetCertificate:   getCert,
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: verify,
	}
}
