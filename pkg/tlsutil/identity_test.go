package tlsutil_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

func TestValidateSPIFFEID(t *testing.T) {
	for _, ok := range []string{"spiffe://example.org/site/a", "spiffe://a.b-c_d/x/Y.z-_", tlsutil.SiteSPIFFEID("switchyard.test", "eu-1")} {
		assert.NoError(t, tlsutil.ValidateSPIFFEID(ok), ok)
	}
	tests := []struct{ id, want string }{
		{"https://example.org/site/a", "must start with spiffe://"},
		{"spiffe:///site/a", "no trust domain"},
		{"spiffe://Example.org/site/a", "trust domain may hold only"},
		{"spiffe://example.org:443/site/a", "trust domain may hold only"},
		{"spiffe://user@example.org/site/a", "trust domain may hold only"},
		{"spiffe://example.org", "no path"},
		{"spiffe://example.org/", "no path"},
		{"spiffe://example.org/a/", "path segments must be non-empty"},
		{"spiffe://example.org/site//a", "path segments must be non-empty"},
		{"spiffe://example.org/site/..", "not '.' or '..'"},
		{"spiffe://example.org/site/a?x=1", "path may hold only"},
		{"spiffe://example.org/site/a#f", "path may hold only"},
		{"spiffe://example.org/site/%41", "path may hold only"},
		{"spiffe://example.org/" + strings.Repeat("a", 2048), "longer than 2048"},
	}
	for _, tt := range tests {
		err := tlsutil.ValidateSPIFFEID(tt.id)
		if assert.Error(t, err, tt.id) {
			assert.Contains(t, err.Error(), tt.want, tt.id)
		}
	}
}

func TestIdentityValidateAndPin(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	leaf := ca.SiteLeaf(t, "a")
	colons := strings.ToUpper(leaf.SHA256[:2])
	for i := 2; i < len(leaf.SHA256); i += 2 {
		colons += ":" + strings.ToUpper(leaf.SHA256[i:i+2])
	}
	for _, id := range []tlsutil.Identity{leaf.Identity(), leaf.Pin(), {SHA256: colons}, {SPIFFEID: leaf.SPIFFEID, SHA256: leaf.SHA256}} {
		require.NoError(t, id.Validate(), id)
		assert.True(t, id.Match(leaf.TLS.Leaf), id)
	}
	assert.Equal(t, "sha256 "+leaf.SHA256, tlsutil.Identity{SHA256: colons}.String())
	other := ca.SiteLeaf(t, "b")
	for _, id := range []tlsutil.Identity{other.Identity(), other.Pin(), {SPIFFEID: leaf.SPIFFEID, SHA256: other.SHA256}, {}} {
		assert.False(t, id.Match(leaf.TLS.Leaf), id)
	}
	assert.Equal(t, 1, tlsutil.MatchIdentity(leaf.TLS.Leaf, []tlsutil.Identity{other.Identity(), leaf.Pin()}))
	assert.Equal(t, -1, tlsutil.MatchIdentity(leaf.TLS.Leaf, []tlsutil.Identity{other.Identity()}))

	assert.EqualError(t, tlsutil.Identity{}.Validate(), "one of spiffeID or sha256 is required")
	err := tlsutil.Identity{SPIFFEID: "x", SHA256: "abc"}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spiffeID: \"x\" must start with spiffe://")
	assert.Contains(t, err.Error(), "sha256: want 64 hex digits (SHA-256), got 3 characters")
	_, err = tlsutil.ParsePin(strings.Repeat("zz", 32))
	assert.ErrorContains(t, err, "not hex")

	// A certificate with two URI SANs is no SVID: it matches no SPIFFE ID.
	two := ca.Issue(t, leaf.SPIFFEID)
	c := *two.TLS.Leaf
	c.URIs = append(c.URIs, c.URIs[0])
	assert.False(t, leaf.Identity().Match(&c))
}

// mtlsServer serves HTTPS on 127.0.0.1 with a required client certificate
// checked by verify; the handler answers the index of the client's
// identity among ids.
func mtlsServer(t *testing.T, cert *tls.Certificate, verify func(tls.ConnectionState) error, ids []tlsutil.Identity) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat("x", 1+tlsutil.MatchIdentity(r.TLS.PeerCertificates[0], ids)))
		}),
		TLSConfig:         tlsutil.MutualServerConfig(tlsutil.Static(*cert), verify),
		ReadHeaderTimeout: time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ServeTLS(ln, "", "") })
	t.Cleanup(func() {
		_ = srv.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func get(t *testing.T, addr string, cfg *tls.Config) (string, error) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Get("https://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func staticClient(l *tlstest.Leaf) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &l.TLS, nil }
}

// TestVerifyPeerHandshakes runs real mutual-TLS handshakes on loopback:
// each side accepts only the identities it expects, checked against the
// CA when one is given.
func TestVerifyPeerHandshakes(t *testing.T) {
	ca, otherCA := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	server := ca.SiteLeaf(t, "b")
	clientA, clientEPP := ca.SiteLeaf(t, "a"), ca.SiteLeaf(t, "epp")
	pool := ca.Pool
	ids := []tlsutil.Identity{clientA.Identity(), clientEPP.Identity()}
	addr := mtlsServer(t, &server.TLS, tlsutil.VerifyPeer(ids, pool, x509.ExtKeyUsageClientAuth), ids)

	client := func(l *tlstest.Leaf, want tlsutil.Identity, roots func() *x509.CertPool) *tls.Config {
		return tlsutil.ClientConfig("localhost", staticClient(l), tlsutil.VerifyPeer([]tlsutil.Identity{want}, roots, x509.ExtKeyUsageServerAuth))
	}
	t.Run("both identities verified", func(t *testing.T) {
		body, err := get(t, addr, client(clientA, server.Identity(), pool))
		require.NoError(t, err)
		assert.Equal(t, "x", body, "the server tells client a ...")
		body, err = get(t, addr, client(clientEPP, server.Pin(), pool))
		require.NoError(t, err)
		assert.Equal(t, "xx", body, "... from the EPP")
	})
	t.Run("server presents another identity", func(t *testing.T) {
		_, err := get(t, addr, client(clientA, tlsutil.Identity{SPIFFEID: tlsutil.SiteSPIFFEID(tlstest.TrustDomain, "c")}, pool))
		var pe *tlsutil.PeerError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, tlsutil.PeerWrongIdentity, pe.Reason)
		assert.Contains(t, pe.Error(), server.SPIFFEID)
		assert.True(t, tlsutil.IsPeerError(err))
	})
	t.Run("server signed by another CA", func(t *testing.T) {
		_, err := get(t, addr, client(clientA, server.Identity(), otherCA.Pool))
		var pe *tlsutil.PeerError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, tlsutil.PeerUntrusted, pe.Reason)
	})
	t.Run("client presents another identity", func(t *testing.T) {
		_, err := get(t, addr, client(ca.SiteLeaf(t, "c"), server.Identity(), pool))
		require.Error(t, err)
		assert.False(t, tlsutil.IsPeerError(err))
	})
	t.Run("client with the right SPIFFE ID from another CA", func(t *testing.T) {
		forged := otherCA.SiteLeaf(t, "a")
		_, err := get(t, addr, client(forged, server.Identity(), pool))
		require.Error(t, err)
	})
	t.Run("client without a certificate", func(t *testing.T) {
		cfg := client(clientA, server.Identity(), pool)
		cfg.GetClientCertificate = nil
		_, err := get(t, addr, cfg)
		require.Error(t, err)
	})
	t.Run("pinned self-signed peer without a CA", func(t *testing.T) {
		self := tlstest.SelfSigned(t, "")
		pinned := clientA.Pin()
		addr := mtlsServer(t, &self.TLS, tlsutil.VerifyPeer([]tlsutil.Identity{pinned}, nil, x509.ExtKeyUsageClientAuth), []tlsutil.Identity{pinned})
		body, err := get(t, addr, client(clientA, self.Pin(), nil))
		require.NoError(t, err)
		assert.Equal(t, "x", body)
		_, err = get(t, addr, client(clientA, server.Pin(), nil))
		var pe *tlsutil.PeerError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, tlsutil.PeerWrongIdentity, pe.Reason)
	})
	var pe tlsutil.PeerError
	pe.Reason, pe.Want = tlsutil.PeerNoCertificate, ids
	assert.Contains(t, pe.Error(), "peer sent no certificate (want "+clientA.SPIFFEID+" or "+clientEPP.SPIFFEID+")")
}

// TestClientCertificateReload: a client certificate replaced on disk is
// presented on the next connection.
func TestClientCertificateReload(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	server, first, second := ca.SiteLeaf(t, "b"), ca.SiteLeaf(t, "a"), ca.SiteLeaf(t, "epp")
	ids := []tlsutil.Identity{first.Identity(), second.Identity()}
	addr := mtlsServer(t, &server.TLS, tlsutil.VerifyPeer(ids, ca.Pool, x509.ExtKeyUsageClientAuth), ids)

	dir := t.TempDir()
	certFile, keyFile := first.WriteFiles(t, filepath.Join(dir))
	r, err := tlsutil.NewFileReloader(certFile, keyFile, testr.New(t), tlsutil.WithRegisterer(prometheus.NewRegistry()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	cfg := tlsutil.ClientConfig("localhost", r.GetClientCertificate, tlsutil.VerifyPeer([]tlsutil.Identity{server.Identity()}, ca.Pool, x509.ExtKeyUsageServerAuth))
	body, err := get(t, addr, cfg)
	require.NoError(t, err)
	assert.Equal(t, "x", body)

	second.WriteFiles(t, dir)
	require.Eventually(t, func() bool {
		body, err := get(t, addr, cfg.Clone())
		return err == nil && body == "xx"
	}, 2*time.Second, 20*time.Millisecond)
	assert.Equal(t, second.SHA256, tlsutil.Fingerprint(r.Current().Leaf.Raw))

	_, err = tlsutil.NewFileReloader("", keyFile, logr.Discard())
	assert.Error(t, err)
}

// TestCABundleReload: a new CA bundle applies to the next handshake; a
// broken one is refused and the current pool stays.
func TestCABundleReload(t *testing.T) {
	caA, caB := tlstest.NewCA(t, "a"), tlstest.NewCA(t, "b")
	dir := t.TempDir()
	path := caA.WriteFile(t, dir)
	reg := prometheus.NewRegistry()
	b, err := tlsutil.NewCABundle(path, logr.Discard(), tlsutil.WithRegisterer(reg))
	require.NoError(t, err)
	leafB := caB.SiteLeaf(t, "x")
	verify := tlsutil.VerifyPeer([]tlsutil.Identity{leafB.Identity()}, b.Pool, x509.ExtKeyUsageServerAuth)
	cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{leafB.TLS.Leaf}}
	require.Error(t, verify(cs))

	require.NoError(t, os.WriteFile(path, []byte("garbage"), 0o600))
	assert.False(t, b.Reload())
	assert.False(t, b.Reload(), "the same broken bundle is counted once")
	assert.Equal(t, 1.0, counter(t, reg, "failure"))

	caB.WriteFile(t, dir)
	assert.True(t, b.Reload())
	require.NoError(t, verify(cs))
	assert.Equal(t, 1.0, counter(t, reg, "success"))
	assert.False(t, b.Reload(), "unchanged")

	_, err = tlsutil.NewCABundle(filepath.Join(dir, "missing"), logr.Discard())
	assert.ErrorContains(t, err, "no such file")
	require.NoError(t, os.WriteFile(path, append([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), caA.PEM...), 0o600))
	_, err = tlsutil.NewCABundle(path, logr.Discard())
	assert.ErrorContains(t, err, "PEM block 1: parse certificate")
	require.NoError(t, os.WriteFile(path, make([]byte, tlsutil.MaxCABundleBytes+1), 0o600))
	_, err = tlsutil.NewCABundle(path, logr.Discard())
	assert.ErrorContains(t, err, "larger than")
	_, n, err := tlsutil.ParseCABundle(append(append([]byte("-----BEGIN X-----\nAA==\n-----END X-----\n"), caA.PEM...), caB.PEM...))
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

// counter reads switchyard_tls_ca_bundle_reloads_total{result}.
func counter(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_tls_ca_bundle_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestHandlerLevelRefusal: a server that accepts any client certificate in
// the handshake and checks it in its handler answers 403, which the client
// can tell from a network failure; it tells its clients apart by identity.
func TestHandlerLevelRefusal(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	server, clientA, stranger := ca.SiteLeaf(t, "b"), ca.SiteLeaf(t, "a"), ca.SiteLeaf(t, "z")
	v := tlsutil.PeerVerifier{Accept: []tlsutil.Identity{clientA.Identity()}, Roots: ca.Pool, Usage: x509.ExtKeyUsageClientAuth}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := v.Verify(r.TLS.PeerCertificates); err != nil {
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
			_, _ = io.WriteString(w, "ok")
		}),
		TLSConfig:         tlsutil.MutualServerConfig(tlsutil.Static(server.TLS), nil),
		ReadHeaderTimeout: time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ServeTLS(ln, "", "") })
	defer func() {
		_ = srv.Close()
		wg.Wait()
	}()
	for _, tt := range []struct {
		leaf *tlstest.Leaf
		code int
	}{{clientA, http.StatusOK}, {stranger, http.StatusForbidden}} {
		cfg := tlsutil.ClientConfig("localhost", staticClient(tt.leaf), tlsutil.VerifyPeer([]tlsutil.Identity{server.Identity()}, ca.Pool, x509.ExtKeyUsageServerAuth))
		tr := &http.Transport{TLSClientConfig: cfg}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + ln.Addr().String() + "/")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		tr.CloseIdleConnections()
		assert.Equal(t, tt.code, resp.StatusCode, string(body))
	}
}

// TestIdentityCanonicalAndOverlaps: identities compare as a verifier sees
// them: pins in any case, with or without colons; SPIFFE IDs with the
// trust domain lower-cased and no trailing slash; one certificate that
// could prove two identities makes them overlap.
func TestIdentityCanonicalAndOverlaps(t *testing.T) {
	pin := strings.Repeat("ab", 32)
	pinColons := strings.TrimSuffix(strings.Repeat("AB:", 32), ":")
	assert.Equal(t, tlsutil.Identity{SHA256: pin}, tlsutil.Identity{SHA256: " " + pinColons + " "}.Canonical())
	assert.Equal(t, tlsutil.Identity{SPIFFEID: "spiffe://grid.example/site/A"}, tlsutil.Identity{SPIFFEID: "SPIFFE://Grid.Example/site/A/"}.Canonical(), "the path keeps its case")
	assert.Equal(t, tlsutil.Identity{SHA256: "xyz"}, tlsutil.Identity{SHA256: "xyz"}.Canonical(), "unparsable: trimmed only")
	tests := []struct {
		name string
		a, b tlsutil.Identity
		want bool
	}{
		{"same pin, other form", tlsutil.Identity{SHA256: pin}, tlsutil.Identity{SHA256: pinColons}, true},
		{"other pins", tlsutil.Identity{SHA256: pin}, tlsutil.Identity{SHA256: strings.Repeat("cd", 32)}, false},
		{"same SPIFFE ID, other form", tlsutil.Identity{SPIFFEID: "spiffe://td/site/a"}, tlsutil.Identity{SPIFFEID: "spiffe://TD/site/a/"}, true},
		{"path case matters", tlsutil.Identity{SPIFFEID: "spiffe://td/site/a"}, tlsutil.Identity{SPIFFEID: "spiffe://td/site/A"}, false},
		{"ID and ID with a pin", tlsutil.Identity{SPIFFEID: "spiffe://td/site/a"}, tlsutil.Identity{SPIFFEID: "spiffe://td/site/a", SHA256: pin}, true},
		{"same ID, other pins", tlsutil.Identity{SPIFFEID: "spiffe://td/site/a", SHA256: pin}, tlsutil.Identity{SPIFFEID: "spiffe://td/site/a", SHA256: strings.Repeat("cd", 32)}, false},
		{"pin only and ID only", tlsutil.Identity{SHA256: pin}, tlsutil.Identity{SPIFFEID: "spiffe://td/site/a"}, false},
		{"zero", tlsutil.Identity{}, tlsutil.Identity{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.a.Overlaps(tt.b))
			assert.Equal(t, tt.want, tt.b.Overlaps(tt.a), "symmetric")
		})
	}
}

// TestPinnedLeafValidity: a peer known by its pin only (no CA bundle) is
// still refused outside its certificate's validity period, judged on the
// verifier's clock (a fake one here, and the wall clock by default).
func TestPinnedLeafValidity(t *testing.T) {
	now := time.Now()
	expired := tlstest.SelfSignedBetween(t, "", now.Add(-48*time.Hour), now.Add(-time.Hour))
	future := tlstest.SelfSignedBetween(t, "", now.Add(time.Hour), now.Add(48*time.Hour))
	valid := tlstest.SelfSigned(t, "")
	for _, tc := range []struct {
		name   string
		leaf   *tlstest.Leaf
		now    func() time.Time
		reason string // "" accepted
	}{
		{"expired, wall clock", expired, nil, tlsutil.PeerExpired},
		{"not yet valid, wall clock", future, nil, tlsutil.PeerExpired},
		{"valid, wall clock", valid, nil, ""},
		{"expired leaf, at a time it was valid", expired, func() time.Time { return now.Add(-2 * time.Hour) }, ""},
		{"valid leaf, at a time past it", valid, func() time.Time { return now.Add(72 * time.Hour) }, tlsutil.PeerExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tlsutil.PeerVerifier{Accept: []tlsutil.Identity{tc.leaf.Pin()}, Usage: x509.ExtKeyUsageClientAuth, Now: tc.now}
			i, err := v.Verify([]*x509.Certificate{tc.leaf.TLS.Leaf})
			if tc.reason == "" {
				require.NoError(t, err)
				assert.Equal(t, 0, i)
				return
			}
			var pe *tlsutil.PeerError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.reason, pe.Reason)
			assert.Contains(t, err.Error(), "not valid at")
			assert.True(t, tlsutil.IsPeerError(err))
		})
	}

	// In a real handshake, through VerifyPeer (the wall clock).
	srv := tlsutil.MutualServerConfig(tlsutil.Static(expired.TLS), nil)
	l, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	require.NoError(t, err)
	done := make(chan struct{})
	defer func() {
		_ = l.Close()
		<-done
	}()
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	client := tlsutil.ClientConfig("localhost", func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &valid.TLS, nil },
		tlsutil.VerifyPeer([]tlsutil.Identity{expired.Pin()}, nil, x509.ExtKeyUsageServerAuth))
	conn, err := tls.Dial("tcp", l.Addr().String(), client)
	if conn != nil {
		_ = conn.Close()
	}
	var pe *tlsutil.PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, tlsutil.PeerExpired, pe.Reason)
}
