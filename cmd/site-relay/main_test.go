package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/switchyard-ai/switchyard/pkg/multisite/relay"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runCmd(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidate(t *testing.T) {
	code, out, errOut := runCmd(t, nil, "validate", "testdata/site-relay.yaml")
	assert.Equal(t, 0, code, errOut)
	assert.Equal(t, "testdata/site-relay.yaml: OK\n", out)

	code, out, _ = runCmd(t, nil, "validate", "testdata/broken.yaml")
	assert.Equal(t, 1, code)
	assert.Equal(t, `testdata/broken.yaml: invalid site-relay configuration: 2 errors:
  providers[0].metricsConfig.staleMetricsSecond: unknown field "staleMetricsSecond" (did you mean "staleMetricsSeconds"?)
  scrapeInterval: expected a duration such as "2s" or "500ms", got a number (write "1s" for 1 seconds)
`, out)

	// Fix the decoding problems with flags; validation problems remain.
	code, out, _ = runCmd(t, nil, "validate", "--site", "EU_1", "testdata/site-relay.yaml")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `site: "EU_1" must be a DNS-1123 label`)

	code, _, errOut = runCmd(t, nil, "validate", "--provider", "p", "--metrics-endpoint", "http://10.0.0.9:9090/metrics", "testdata/site-relay.yaml")
	assert.Equal(t, 0, code)
	assert.Contains(t, errOut, "warning: providers[0].metricsConfig.endpoint: 10.0.0.9 is an IP address")

	code, out, _ = runCmd(t, nil, "validate", "testdata/nope.yaml")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "no such file or directory")
	code, _, errOut = runCmd(t, nil, "validate")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "want exactly one file, got 0")
	code, _, _ = runCmd(t, nil, "frobnicate")
	assert.Equal(t, 2, code)
	code, out, _ = runCmd(t, nil, "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "site-relay validate")
}

// TestPrecedence: flag > environment > file > default.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	data, err := os.ReadFile("testdata/site-relay.yaml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, append(data, []byte("scrapeInterval: 5s\n")...), 0o600))
	interval := func(env map[string]string, args ...string) time.Duration {
		var cf configFlags
		fs := newFlagSet()
		cf.register(fs)
		require.NoError(t, fs.Parse(args))
		cfg, _, err := load(file, &cf, func(k string) string { return env[k] })
		require.NoError(t, err)
		return cfg.ScrapeInterval
	}
	env := map[string]string{relay.ScrapeIntervalEnv: "3"}
	assert.Equal(t, 2*time.Second, interval(env, "--scrape-interval", "2s"))
	assert.Equal(t, 3*time.Second, interval(env))
	assert.Equal(t, 5*time.Second, interval(nil))
	require.NoError(t, os.WriteFile(file, data, 0o600))
	assert.Equal(t, relay.DefaultScrapeInterval, interval(nil))

	code, out, _ := runCmd(t, map[string]string{relay.ScrapeIntervalEnv: "soon"}, "validate", file)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, relay.ScrapeIntervalEnv+": must be a positive number of seconds")
}

func TestParsePeer(t *testing.T) {
	p, err := parsePeer("site=b,address=127.0.0.2:8443,serverName=relay.b,spiffeID=spiffe://t/site/b,sha256=ab")
	require.NoError(t, err)
	assert.Equal(t, relay.Peer{Site: "b", Address: "127.0.0.2:8443", ServerName: "relay.b"}, relay.Peer{Site: p.Site, Address: p.Address, ServerName: p.ServerName})
	assert.Equal(t, "spiffe://t/site/b", p.Identity.SPIFFEID)
	assert.Equal(t, "ab", p.Identity.SHA256)
	for _, bad := range []string{"site=b", "address=x:1", "site=b,address=x:1,port=3", "b"} {
		_, err := parsePeer(bad)
		assert.Error(t, err, bad)
	}
	code, out, _ := runCmd(t, nil, "validate", "--peer", "site=b", "testdata/site-relay.yaml")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `--peer 1 "site=b": site and address are required`)
}

// TestServe starts the binary's serve command with flags only, sees it
// ready on its admin port, and stops it with its context.
func TestServe(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	certFile, keyFile := ca.SiteLeaf(t, "a").WriteFiles(t, dir)
	caFile := ca.WriteFile(t, dir)
	admin := reserve(t, "127.0.30.1")
	args := []string{"serve", "--site", "a", "--cluster", "c", "--trust-domain", tlstest.TrustDomain,
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-file", caFile,
		"--listen-address", reserve(t, "127.0.30.1"), "--admin-address", admin,
		"--provider", "pool", "--peer", "site=b,address=127.0.30.2:1", "--peer-poll-interval", "100ms", "--request-timeout", "100ms", "--connect-timeout", "100ms"}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, func(string) string { return "" }, &out, &errOut) }()
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond)
	http.DefaultClient.CloseIdleConnections()
	cancel()
	assert.Equal(t, 0, <-done)
	assert.Contains(t, out.String(), "site-relay stopped")
	assert.True(t, strings.Contains(errOut.String(), "site-relay serving"), errOut.String())

	code, _, errStr := runCmd(t, nil, "serve", "--log-format", "xml")
	assert.Equal(t, 2, code)
	assert.Contains(t, errStr, "--log-format")
	code, _, errStr = runCmd(t, nil, "--site", "a")
	assert.Equal(t, 1, code)
	assert.Contains(t, errStr, "tls.certFile: required")
}

func reserve(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestReadmeExample: the configuration the README's site-relay section
// shows is valid, and is the one in testdata.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## site-relay\n")
	require.True(t, ok, "README has a site-relay section")
	_, block, ok := strings.Cut(section, "```yaml\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	file := filepath.Join(t.TempDir(), "readme.yaml")
	require.NoError(t, os.WriteFile(file, []byte(block), 0o600))
	code, out, errOut := runCmd(t, nil, "validate", file)
	assert.Equal(t, 0, code, out+errOut)
	testdata, err := os.ReadFile("testdata/site-relay.yaml")
	require.NoError(t, err)
	_, want, _ := strings.Cut(string(testdata), "\n") // the first line is a comment
	assert.Equal(t, want, block)
}
