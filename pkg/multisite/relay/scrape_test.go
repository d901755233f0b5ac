package relay

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

// TestScrapeTLSAndBearerToken: an https EPP metrics port verified against
// a CA file and a server name, guarded by a bearer token read from a file
// (re-read when it changes); a wrong token is an Unauthorized condition.
func TestScrapeTLSAndBearerToken(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.13.1")
	eppCA := tlstest.NewCA(t, "epp-ca")
	eppLeaf := eppCA.Issue(t, "", "epp.serving.svc")
	const token = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, poolText("v1", true))
	}))
	l, err := net.Listen("tcp", a.ip+":0")
	require.NoError(t, err)
	srv.Listener = l
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{eppLeaf.TLS}, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("wrong-token-wrong-token\n"), 0o600))
	cfg := e.config(a, srv.URL+"/metrics")
	cfg.Providers[0].MetricsConfig.BearerTokenFile = tokenFile
	cfg.Providers[0].MetricsConfig.TLS = &ScrapeTLS{CAFile: eppCA.WriteFile(t, dir), ServerName: "epp.serving.svc"}
	clock := newFakeClock()
	r, reg := newRelay(t, cfg, clock)
	start(t, r, false)

	r.ScrapeOnce(context.Background())
	c := r.Status().Providers[0].Conditions[0]
	assert.Equal(t, "Unauthorized", c.Reason)
	assert.Contains(t, c.Message, "401")
	assert.Contains(t, c.Message, "bearerTokenFile")

	time.Sleep(10 * time.Millisecond) // a new modification time
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	r.ScrapeOnce(context.Background())
	c = r.Status().Providers[0].Conditions[0]
	assert.Equal(t, "Scraped", c.Reason, c.Message)
	res, _ := e.fetch(r, a, a.epp)
	assert.Contains(t, rowsOf(res, "a"), signals.NameConfigGeneration+"/pool")
	assert.Equal(t, 1.0, metricValue(t, reg, MetricScrapes, map[string]string{"provider": "pool", "result": ScrapeUnauthorized}))

	// The wrong server name fails verification.
	cfg2 := e.config(a, srv.URL+"/metrics")
	cfg2.ListenAddress = a.ip + ":0"
	cfg2.Providers[0].MetricsConfig.BearerTokenFile = tokenFile
	cfg2.Providers[0].MetricsConfig.TLS = &ScrapeTLS{CAFile: filepath.Join(dir, "ca.crt"), ServerName: "other.svc"}
	r2, _ := newRelay(t, cfg2, clock)
	r2.ScrapeOnce(context.Background())
	c = r2.Status().Providers[0].Conditions[0]
	assert.Equal(t, "ScrapeFailed", c.Reason)
	assert.True(t, strings.Contains(c.Message, "certificate"), c.Message)
	r2.targets[0].client.CloseIdleConnections()
	require.NoError(t, r2.signalsLis.Close())
	require.NoError(t, r2.adminLis.Close())

	// A token file that does not hold a token is refused at start.
	require.NoError(t, os.WriteFile(tokenFile, []byte("short\n"), 0o600))
	cfg3 := e.config(a, srv.URL+"/metrics")
	cfg3.Providers[0].MetricsConfig.BearerTokenFile = tokenFile
	_, err = New(cfg3, Options{})
	assert.ErrorContains(t, err, "providers[0].metricsConfig.bearerTokenFile")
}
