package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/prefixawarehash"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/usageweight"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
	"github.com/switchyard-ai/switchyard/pkg/tokenauth"
)

type fakeSource struct {
	pool    Pool
	plugins map[string]scheduling.Plugin
}

func (f *fakeSource) Pool() Pool                            { return f.pool }
func (f *fakeSource) Plugins() map[string]scheduling.Plugin { return f.plugins }

var now = time.Date(2026, 12, 2, 3, 30, 0, 0, time.UTC)

func source(t *testing.T) (*fakeSource, *usageweight.Scorer) {
	t.Helper()
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: prometheus.NewRegistry(), Seed: 1})
	p := usageweight.DefaultParams()
	p.QuotaAware.Enabled = true
	us, err := usageweight.New("usage", p, h)
	require.NoError(t, err)
	us.SetClock(func() time.Time { return now })
	pk, err := prefixawarehash.New("prefix", prefixawarehash.DefaultParams(), h)
	require.NoError(t, err)
	load := schedulingtest.NewFakeLoad(2, 300*time.Millisecond)
	eps := []*scheduling.Endpoint{
		schedulingtest.Endpoint("engine-0").Address("127.0.0.1").Port(8001).Queue(3).Running(2).KVCache(0.5).UpdateTime(now.Add(-time.Second)).Load(load).Build(),
		schedulingtest.Endpoint("provider-a").Address("127.0.0.1").Port(8002).Attr(usageweight.ProviderTPMAttribute, 1000).UpdateTime(time.Time{}).Build(),
	}
	us.ResponseReceived(context.Background(), &scheduling.Request{}, &scheduling.Response{Headers: map[string]string{
		"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "25",
	}}, eps[1])
	pk.Pick(context.Background(), &scheduling.Request{Model: "m"}, []scheduling.ScoredEndpoint{{Endpoint: eps[0]}, {Endpoint: eps[1]}})
	src := &fakeSource{
		pool: Pool{Synced: true, Endpoints: eps,
			OutOfRotation: func(e *scheduling.Endpoint) string { return "" },
			Stale:         func(*scheduling.Endpoint) bool { return false }},
		plugins: map[string]scheduling.Plugin{"usage": us, "prefix": pk},
	}
	return src, us
}

func tokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte(token+"\n"), 0o600))
	return path
}

func get(t *testing.T, url, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, body
}

const token1 = "0123456789abcdef0123456789abcdef"

// TestC51_AdminAPIWithToken: over real HTTP on loopback, every admin
// endpoint answers 401 without the token (and with a wrong one) and its
// documented JSON with it.
func TestC51_AdminAPIWithToken(t *testing.T) {
	src, _ := source(t)
	g, err := tokenauth.New(tokenFile(t, token1), logr.Discard())
	require.NoError(t, err)
	srv := httptest.NewServer(TokenGuard(g, logr.Discard())(Handler(src, func() time.Time { return now })))
	defer srv.Close()
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"))

	paths := []string{"/admin/backends", "/admin/stats/backends", "/admin/backends/engine-0/engine-stats", "/admin/prefix-routing/stats"}
	for _, p := range paths {
		code, h, _ := get(t, srv.URL+p, "")
		assert.Equal(t, http.StatusUnauthorized, code, p)
		assert.Equal(t, `Bearer realm="switchyard-admin"`, h.Get("WWW-Authenticate"))
		code, h, _ = get(t, srv.URL+p, "wrong-token-wrong-token")
		assert.Equal(t, http.StatusUnauthorized, code, p)
		assert.Contains(t, h.Get("WWW-Authenticate"), `error="invalid_token"`)
	}

	code, h, body := get(t, srv.URL+"/admin/backends", token1)
	require.Equal(t, http.StatusOK, code, string(body))
	assert.Equal(t, "application/json", h.Get("Content-Type"))
	var backends Backends
	require.NoError(t, json.Unmarshal(body, &backends))
	assert.Equal(t, Backends{Synced: true, Backends: []Backend{
		{Name: "engine-0", Key: "engine-0", Address: "127.0.0.1:8001", Weight: 1, Routable: true, Health: "unknown", Breaker: "closed"},
		{Name: "provider-a", Key: "provider-a", Address: "127.0.0.1:8002", Weight: 1, ProviderTPM: 1000, Routable: true, Health: "unknown", Breaker: "closed"},
	}}, backends)

	code, _, body = get(t, srv.URL+"/admin/stats/backends", token1)
	require.Equal(t, http.StatusOK, code)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(body, &raw))
	list := raw["backends"].([]any)
	require.Len(t, list, 2)
	engine := list[0].(map[string]any)
	assert.Nil(t, engine["quota"], "quota is null without a snapshot")
	es := engine["engineStats"].(map[string]any)
	assert.Equal(t, map[string]any{"measured": true, "fresh": true, "updatedAt": "2026-12-02T03:29:59Z", "ageSeconds": 1.0,
		"waitingQueue": 3.0, "runningRequests": 2.0, "kvCacheUsage": 0.5}, es)
	assert.Equal(t, map[string]any{"inFlight": 2.0, "inFlightTokens": 0.0, "served": 0.0, "errors": 0.0, "e2eEwmaSeconds": 0.3}, engine["requests"])
	provider := list[1].(map[string]any)
	assert.Equal(t, map[string]any{"measured": false, "fresh": false}, provider["engineStats"])
	quota := provider["quota"].(map[string]any)
	assert.Equal(t, map[string]any{
		"observedAt": "2026-12-02T03:30:00Z", "ageSeconds": 0.0, "ttlSeconds": 60.0, "fresh": true,
		"axes":    map[string]any{"requests": map[string]any{"ratio": 0.25}},
		"headers": map[string]any{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "25"},
	}, quota)
	usage := provider["usage"].(map[string]any)
	assert.Equal(t, "usage", usage["scorer"])
	assert.Equal(t, 0.25, usage["remaining"])

	code, _, body = get(t, srv.URL+"/admin/backends/provider-a/engine-stats", token1)
	require.Equal(t, http.StatusOK, code)
	var one BackendStats
	require.NoError(t, json.Unmarshal(body, &one))
	assert.Equal(t, "provider-a", one.Name)
	require.NotNil(t, one.Quota)
	assert.Equal(t, 0.25, one.Quota.Axes["requests"].Ratio)

	code, _, body = get(t, srv.URL+"/admin/backends/"+url.PathEscape("nobody")+"/engine-stats", token1)
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, string(body), `"error":"no endpoint named nobody"`)

	code, _, body = get(t, srv.URL+"/admin/prefix-routing/stats", token1)
	require.Equal(t, http.StatusOK, code)
	var pr PrefixRouting
	require.NoError(t, json.Unmarshal(body, &pr))
	require.Len(t, pr.Pickers, 1)
	assert.Equal(t, "prefix", pr.Pickers[0].Picker)
	assert.Equal(t, uint64(1), pr.Pickers[0].Requests[prefixawarehash.StrategyModelHashFallback])

	code, _, _ = get(t, srv.URL+"/admin/nothing", token1)
	assert.Equal(t, http.StatusNotFound, code)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/admin/backends", nil)
	req.Header.Set("Authorization", "Bearer "+token1)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// TestC51_TokenFileReloaded: a rotated token file takes over (the guard
// watches it); the old token is refused.
func TestC51_TokenFileReloaded(t *testing.T) {
	src, _ := source(t)
	path := tokenFile(t, token1)
	g, err := tokenauth.New(path, logr.Discard())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(TokenGuard(g, logr.Discard())(Handler(src, nil)))
	defer srv.Close()
	code, _, _ := get(t, srv.URL+"/admin/backends", token1)
	require.Equal(t, http.StatusOK, code)
	const token2 = "fedcba9876543210fedcba9876543210"
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte(token2), 0o600))
	require.NoError(t, os.Rename(tmp, path))
	require.Eventually(t, func() bool {
		code, _, _ := get(t, srv.URL+"/admin/backends", token2)
		return code == http.StatusOK
	}, 15*time.Second, 50*time.Millisecond)
	code, _, _ = get(t, srv.URL+"/admin/backends", token1)
	assert.Equal(t, http.StatusUnauthorized, code)
}

// TestC51_AmbiguousName: an endpoint name shared by two sites needs the
// key.
func TestC51_AmbiguousName(t *testing.T) {
	eps := []*scheduling.Endpoint{
		schedulingtest.Endpoint("e").Site("a").Build(),
		schedulingtest.Endpoint("e").Site("b").Build(),
	}
	srv := httptest.NewServer(Handler(&fakeSource{pool: Pool{Endpoints: eps}}, nil))
	defer srv.Close()
	code, _, _ := get(t, srv.URL+"/admin/backends/e/engine-stats", "")
	assert.Equal(t, http.StatusConflict, code)
	code, _, body := get(t, srv.URL+"/admin/backends/"+url.PathEscape("b:e")+"/engine-stats", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), `"key": "b:e"`)
}
