package tlstest

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

func TestSiteLeaf(t *testing.T) {
	ca := NewCA(t, "ca")
	l := ca.SiteLeaf(t, "eu-1", "127.0.0.3", "relay.example")
	leaf := l.TLS.Leaf
	assert.Equal(t, "spiffe://switchyard.test/site/eu-1", l.SPIFFEID)
	require.Len(t, leaf.URIs, 1)
	assert.Equal(t, l.SPIFFEID, leaf.URIs[0].String())
	require.NoError(t, l.Identity().Validate())
	assert.True(t, l.Identity().Match(leaf))
	assert.True(t, l.Pin().Match(leaf))
	for _, host := range []string{"127.0.0.1", "127.0.0.3", "::1", "localhost", "relay.example"} {
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			_, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{u}})
			assert.NoError(t, err, host)
		}
	}
	dir := t.TempDir()
	certFile, keyFile := l.WriteFiles(t, dir)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	require.NoError(t, err)
	assert.Equal(t, l.TLS.Certificate[0], pair.Certificate[0])
	data, err := os.ReadFile(ca.WriteFile(t, dir))
	require.NoError(t, err)
	_, n, err := tlsutil.ParseCABundle(data)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestSelfSigned(t *testing.T) {
	l := SelfSigned(t, "spiffe://switchyard.test/site/x")
	pool := x509.NewCertPool()
	pool.AddCert(l.TLS.Leaf)
	_, err := l.TLS.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	assert.Equal(t, l.TLS.Leaf.Subject.String(), l.TLS.Leaf.Issuer.String())
	assert.Empty(t, NewCA(t, "x").Issue(t, "").SPIFFEID)
}
