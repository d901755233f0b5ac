package tlsutil

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSelfSigned(t *testing.T) {
	cert, err := SelfSigned([]string{"epp.example.com", "127.0.0.2", "*.svc.example"}, time.Hour)
	require.NoError(t, err)
	leaf := cert.Leaf
	require.NotNil(t, leaf)
	key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
	require.True(t, ok, "ECDSA key, got %T", cert.PrivateKey)
	assert.Equal(t, elliptic.P256(), key.Curve)
	assert.WithinDuration(t, time.Now().Add(time.Hour), leaf.NotAfter, time.Minute)
	assert.True(t, leaf.NotBefore.Before(time.Now()))

	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"127.0.0.1", "::1", "localhost", "epp.example.com", "127.0.0.2", "a.svc.example"} {
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, "verify for %s", name)
	}
	if h, err := os.Hostname(); err == nil && validHostname(h) == nil {
		assert.Contains(t, leaf.DNSNames, strings.ToLower(h))
	}
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots})
	assert.Error(t, err)

	// Through a real handshake on loopback, verified with its own pool.
	addr := serveTLS(t, Static(cert))
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	require.NoError(t, err)
	assert.Equal(t, "h2", conn.ConnectionState().NegotiatedProtocol)
	require.NoError(t, conn.Close())
}

func TestSelfSignedErrors(t *testing.T) {
	_, err := SelfSigned(nil, 0)
	assert.EqualError(t, err, "tlsutil: self-signed certificate validity must be positive, got 0s")
	_, err = SelfSigned([]string{"ok.example", "host:9002"}, time.Hour)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"host:9002"`)
}

func TestParseHosts(t *testing.T) {
	tests := []struct {
		hosts   []string
		dns     []string
		ips     []string
		wantErr string
	}{
		{hosts: []string{"a.example", "A.example", "127.0.0.1", "::1", "0:0:0:0:0:0:0:1"}, dns: []string{"a.example"}, ips: []string{"127.0.0.1", "::1"}},
		{hosts: []string{"*.example.com", "epp-0.epp.ns.svc.cluster.local."}, dns: []string{"*.example.com", "epp-0.epp.ns.svc.cluster.local."}},
		{hosts: []string{""}, wantErr: `host 0 "": empty host name`},
		{hosts: []string{"ok", "bad host"}, wantErr: `host 1 "bad host": invalid character ' '`},
		{hosts: []string{"-a.example"}, wantErr: `must not start or end with '-'`},
		{hosts: []string{"a..example"}, wantErr: `label "" must be 1 to 63 bytes`},
		{hosts: []string{"*."}, wantErr: "wildcard without a domain"},
		{hosts: []string{"é.example"}, wantErr: "invalid character"},
		{hosts: []string{strings.Repeat("a", 64)}, wantErr: "1 to 63 bytes"},
		{hosts: []string{strings.Repeat("a.", 127)}, wantErr: "longer than 253"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.hosts, ","), func(t *testing.T) {
			dns, ips, err := parseHosts(tt.hosts)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.dns, dns)
			var got []string
			for _, ip := range ips {
				got = append(got, ip.String())
			}
			assert.Equal(t, tt.ips, got)
		})
	}
}

func TestServerConfig(t *testing.T) {
	cfg := ServerConfig(nil)
	assert.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
	assert.Equal(t, []string{"h2"}, cfg.NextProtos)

	cert, err := SelfSigned(nil, time.Hour)
	require.NoError(t, err)
	addr := serveTLS(t, Static(cert))
	_, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}) //nolint:gosec // checks the server refuses old versions
	assert.Error(t, err, "TLS 1.1 must be refused")
}

// --- helpers ---

// pemPair returns the PEM files of cert.
func pemPair(t testing.TB, cert tls.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func newCert(t *testing.T) tls.Certificate {
	t.Helper()
	c, err := SelfSigned(nil, time.Hour)
	require.NoError(t, err)
	return c
}

// writeAtomic writes data to dir/name through a temporary file and a
// rename, as cert-manager style tools do.
func writeAtomic(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
}

func writePair(t *testing.T, dir string, cert tls.Certificate) {
	t.Helper()
	c, k := pemPair(t, cert)
	writeAtomic(t, dir, CertFile, c)
	writeAtomic(t, dir, KeyFile, k)
}

// serveTLS accepts TLS handshakes on 127.0.0.1:0 until the test ends.
func serveTLS(t *testing.T, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tln := tls.NewListener(ln, ServerConfig(getCert))
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	})
	t.Cleanup(func() {
		_ = tln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// servedSerial handshakes with addr and returns the server's serial.
func servedSerial(t *testing.T, addr string) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test compares serials itself
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// run starts r.Run until the test ends.
func run(t *testing.T, r *Reloader) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// lineLogger records log lines.
type lineLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLogger) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 4})
}

func (l *lineLogger) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// value reads a counter or gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.Write(&out))
	if out.Counter != nil {
		return out.GetCounter().GetValue()
	}
	return out.GetGauge().GetValue()
}

// --- reloader ---

func TestNewReloaderErrors(t *testing.T) {
	good := newCert(t)
	goodCert, goodKey := pemPair(t, good)
	_, otherKey := pemPair(t, newCert(t))
	tests := []struct {
		name      string
		cert, key []byte // nil: file absent
		want      string
	}{
		{"missing certificate", nil, goodKey, CertFile + ": no such file"},
		{"missing key", goodCert, nil, KeyFile + ": no such file"},
		{"garbage certificate", []byte("hello"), goodKey, CertFile + ": no PEM CERTIFICATE block"},
		{"key in certificate file", goodKey, goodKey, CertFile + ": no PEM CERTIFICATE block"},
		{"garbage key", goodCert, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), KeyFile + ": parse private key"},
		{"no key block", goodCert, []byte("nothing"), KeyFile + ": no PEM PRIVATE KEY block"},
		{"mismatch", goodCert, otherKey, "do not form a pair"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.cert != nil {
				require.NoError(t, os.WriteFile(filepath.Join(dir, CertFile), tt.cert, 0o600))
			}
			if tt.key != nil {
				require.NoError(t, os.WriteFile(filepath.Join(dir, KeyFile), tt.key, 0o600))
			}
			_, err := NewReloader(dir, logr.Discard())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := NewReloader("", logr.Discard())
	assert.EqualError(t, err, "tlsutil: empty certificate directory")
}

// TestReloadAtomicRename: a pair replaced through renames is served within
// a second, seen through a real handshake.
func TestReloadAtomicRename(t *testing.T) {
	dir := t.TempDir()
	first, second := newCert(t), newCert(t)
	writePair(t, dir, first)
	reg := prometheus.NewRegistry()
	r, err := NewReloader(dir, testr.New(t), WithRegisterer(reg))
	require.NoError(t, err)
	r.poll = time.Hour // prove that the watch, not the poll, reloads
	run(t, r)
	addr := serveTLS(t, r.GetCertificate)
	require.Equal(t, first.Leaf.SerialNumber, servedSerial(t, addr))

	writePair(t, dir, second)
	require.Eventually(t, func() bool {
		return servedSerial(t, addr).Cmp(second.Leaf.SerialNumber) == 0
	}, time.Second, 20*time.Millisecond, "new certificate not served within a second")
	assert.Equal(t, 1.0, value(t, r.reloadOK))
	assert.Equal(t, float64(second.Leaf.NotAfter.Unix()), value(t, r.expiry))
}

// TestReloadSecretSymlinkSwap: the kubelet's way of updating a Secret
// volume (a new directory, then an atomic rename of the ..data symlink).
func TestReloadSecretSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	first, second := newCert(t), newCert(t)
	version := func(name string, cert tls.Certificate) {
		vdir := filepath.Join(dir, name)
		require.NoError(t, os.Mkdir(vdir, 0o755))
		c, k := pemPair(t, cert)
		require.NoError(t, os.WriteFile(filepath.Join(vdir, CertFile), c, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(vdir, KeyFile), k, 0o600))
		require.NoError(t, os.Symlink(name, filepath.Join(dir, "..data_tmp")))
		require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	}
	version("..2026_01_01_00_00_00.000000001", first)
	require.NoError(t, os.Symlink(filepath.Join("..data", CertFile), filepath.Join(dir, CertFile)))
	require.NoError(t, os.Symlink(filepath.Join("..data", KeyFile), filepath.Join(dir, KeyFile)))

	r, err := NewReloader(dir, testr.New(t))
	require.NoError(t, err)
	r.poll = time.Hour
	run(t, r)
	addr := serveTLS(t, r.GetCertificate)
	require.Equal(t, first.Leaf.SerialNumber, servedSerial(t, addr))

	version("..2026_01_01_00_00_01.000000002", second)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.000000001")))
	require.Eventually(t, func() bool {
		return servedSerial(t, addr).Cmp(second.Leaf.SerialNumber) == 0
	}, time.Second, 20*time.Millisecond, "new certificate not served within a second")
}

// TestReloadBrokenKeepsCurrent: a broken replacement is refused, logged
// once and counted; the current certificate stays; a good pair afterwards
// is picked up.
func TestReloadBrokenKeepsCurrent(t *testing.T) {
	dir := t.TempDir()
	first, third := newCert(t), newCert(t)
	writePair(t, dir, first)
	var logs lineLogger
	reg := prometheus.NewRegistry()
	r, err := NewReloader(dir, logs.logger(), WithRegisterer(reg))
	require.NoError(t, err)
	r.poll = 50 * time.Millisecond // the poll re-reads the broken pair again and again
	run(t, r)
	addr := serveTLS(t, r.GetCertificate)

	writeAtomic(t, dir, CertFile, []byte("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"))
	require.Eventually(t, func() bool { return logs.count("refusing the new TLS certificate pair") > 0 }, time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // several polls of the same broken pair
	assert.Equal(t, 1, logs.count("refusing the new TLS certificate pair"), "the same broken pair is reported once")
	assert.Equal(t, 1.0, value(t, r.reloadFailed))
	assert.Equal(t, first.Leaf.SerialNumber, servedSerial(t, addr), "the current certificate stays")

	// A key that does not match the current certificate: refused too.
	_, k := pemPair(t, third)
	c, _ := pemPair(t, first)
	writeAtomic(t, dir, CertFile, c)
	writeAtomic(t, dir, KeyFile, k)
	require.Eventually(t, func() bool { return value(t, r.reloadFailed) == 2 }, time.Second, 10*time.Millisecond)
	assert.Equal(t, first.Leaf.SerialNumber, servedSerial(t, addr))

	writePair(t, dir, third)
	require.Eventually(t, func() bool {
		return servedSerial(t, addr).Cmp(third.Leaf.SerialNumber) == 0
	}, time.Second, 20*time.Millisecond)
	assert.Equal(t, 1.0, value(t, r.reloadOK))
}

// TestReloadUnchanged: events that do not change the pair do not count.
func TestReloadUnchanged(t *testing.T) {
	dir := t.TempDir()
	cert := newCert(t)
	writePair(t, dir, cert)
	r, err := NewReloader(dir, logr.Discard(), WithRegisterer(prometheus.NewRegistry()))
	require.NoError(t, err)
	writePair(t, dir, cert) // same bytes
	assert.False(t, r.Reload())
	assert.Equal(t, 0.0, value(t, r.reloadOK))
}

// TestReloaderReRegistration: reloaders on one registry share the
// collectors; the purpose label tells their series apart (the same
// purpose shares them); a purpose outside the closed set is refused.
func TestReloaderReRegistration(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, newCert(t))
	reg := prometheus.NewRegistry()
	a, err := NewReloader(dir, logr.Discard(), WithRegisterer(reg))
	require.NoError(t, err)
	b, err := NewReloader(dir, logr.Discard(), WithRegisterer(reg))
	require.NoError(t, err)
	assert.Same(t, a.expiry, b.expiry, "the same (default) purpose")
	c, err := NewFileReloader(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile), logr.Discard(), WithRegisterer(reg), WithPurpose(PurposeSignalsClient))
	require.NoError(t, err)
	assert.NotSame(t, a.expiry, c.expiry)
	_, err = NewReloader(dir, logr.Discard(), WithRegisterer(reg), WithPurpose("other"))
	assert.ErrorContains(t, err, `purpose "other" is not one of`)
	_, err = NewCABundle(filepath.Join(dir, CertFile), logr.Discard(), WithPurpose("other"))
	assert.ErrorContains(t, err, `purpose "other" is not one of`)

	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_tls_certificate_reloads_total", Help: "x"}))
	_, err = NewReloader(dir, logr.Discard(), WithRegisterer(reg2))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "switchyard_tls_certificate_reloads_total")
}

// TestRunWithoutWatch: a directory that cannot be watched falls back to
// polling, and Run still stops with its context.
func TestRunWithoutWatch(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, newCert(t))
	r, err := NewReloader(dir, logr.Discard())
	require.NoError(t, err)
	r.dir = filepath.Join(dir, "gone") // Add fails
	r.poll = 20 * time.Millisecond
	second := newCert(t)
	run(t, r)
	writePair(t, dir, second)
	require.Eventually(t, func() bool {
		c, _ := r.GetCertificate(nil)
		return c.Leaf.SerialNumber.Cmp(second.Leaf.SerialNumber) == 0
	}, time.Second, 10*time.Millisecond)
}

func BenchmarkGetCertificate(b *testing.B) {
	dir := b.TempDir()
	cert, err := SelfSigned(nil, time.Hour)
	require.NoError(b, err)
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(b, err)
	require.NoError(b, os.WriteFile(filepath.Join(dir, CertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600))
	require.NoError(b, os.WriteFile(filepath.Join(dir, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600))
	r, err := NewReloader(dir, logr.Discard())
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = r.GetCertificate(nil)
	}
}

func BenchmarkSelfSigned(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SelfSigned(nil, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCertificateMetricsByPurpose: the certificates and CA bundles of one
// process (the EPP's serving certificate, its signals client certificate
// and CA, a relay's) are told apart by the purpose label, every series
// exists from the start, and the metrics lint clean.
func TestCertificateMetricsByPurpose(t *testing.T) {
	reg := prometheus.NewRegistry()
	serving, client := t.TempDir(), t.TempDir()
	writePair(t, serving, newCert(t))
	writePair(t, client, newCert(t))
	_, err := NewReloader(serving, logr.Discard(), WithRegisterer(reg))
	require.NoError(t, err)
	_, err = NewFileReloader(filepath.Join(client, CertFile), filepath.Join(client, KeyFile), logr.Discard(), WithRegisterer(reg), WithPurpose(PurposeSignalsClient))
	require.NoError(t, err)
	_, err = NewCABundle(filepath.Join(client, CertFile), logr.Discard(), WithRegisterer(reg), WithPurpose(PurposeSignalsClient))
	require.NoError(t, err)
	_, err = NewCABundle(filepath.Join(serving, CertFile), logr.Discard(), WithRegisterer(reg), WithPurpose(PurposeRelayServer))
	require.NoError(t, err)

	mfs, err := reg.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
	got := map[string][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			got[mf.GetName()] = append(got[mf.GetName()], strings.Join(ls, ","))
			if mf.GetName() == "switchyard_tls_certificate_expiry_timestamp_seconds" {
				assert.Greater(t, m.GetGauge().GetValue(), float64(time.Now().Unix()), "each its own NotAfter")
			}
		}
		slices.Sort(got[mf.GetName()])
	}
	assert.Equal(t, map[string][]string{
		"switchyard_tls_certificate_reloads_total": {
			"purpose=serving,result=failure", "purpose=serving,result=success",
			"purpose=signals_client,result=failure", "purpose=signals_client,result=success",
		},
		"switchyard_tls_certificate_expiry_timestamp_seconds": {"purpose=serving", "purpose=signals_client"},
		"switchyard_tls_ca_bundle_reloads_total": {
			"purpose=relay_server,result=failure", "purpose=relay_server,result=success",
			"purpose=signals_client,result=failure", "purpose=signals_client,result=success",
		},
	}, got)
}
