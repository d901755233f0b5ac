package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// get fetches a path of the metrics port with an optional bearer token.
func get(t *testing.T, s *Server, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.MetricsAddr()+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// Under the defaults (standalone, no token file, pprof off) the metrics
// port serves /metrics to anyone and nothing else: the debug endpoints
// answer 404 with how to turn them on.
func TestMetricsPortDefaultsHideDebug(t *testing.T) {
	cfg := Defaults()
	cfg.EndpointsFile = sims(t, 1)
	require.False(t, cfg.EnablePprof, "pprof is off by default")
	s, _ := run(t, cfg)
	code, _ := get(t, s, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	for _, p := range []string{"/debug/endpoints", "/debug/decisions", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2"} {
		code, body := get(t, s, p, "")
		require.Equal(t, http.StatusNotFound, code, p)
		require.Contains(t, body, "--metrics-token-file", p)
	}
}

// With --metrics-token-file every path of the metrics port needs the
// token; the debug endpoints and (when enabled) pprof are served with it.
func TestMetricsPortToken(t *testing.T) {
	const token = "a-test-token-of-32-bytes-0123456"
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte(token+"\n"), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 2), MetricsTokenFile: file, EnablePprof: true, DecisionBufferSize: 16})
	for _, p := range []string{"/metrics", "/debug/endpoints", "/debug/decisions", "/debug/pprof/", "/debug/pprof/cmdline"} {
		code, _ := get(t, s, p, "")
		require.Equal(t, http.StatusUnauthorized, code, p)
		code, _ = get(t, s, p, "wrong-token-wrong-token-wrong-tok")
		require.Equal(t, http.StatusUnauthorized, code, p)
		code, _ = get(t, s, p, token)
		require.Equal(t, http.StatusOK, code, p)
	}
	_, body := get(t, s, "/debug/endpoints", token)
	var st PoolState
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Len(t, st.Endpoints, 2)
	code, body := get(t, s, "/debug/decisions?limit=17", token)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "query parameter limit: must be an integer in [1, 16]")

	// Without --enable-pprof, pprof is not there even with the token.
	s2, _ := run(t, Config{EndpointsFile: sims(t, 1), MetricsTokenFile: file})
	code, _ = get(t, s2, "/debug/pprof/", token)
	require.Equal(t, http.StatusNotFound, code)
	// Recording off (size 0): /debug/decisions says how to turn it on.
	code, body = get(t, s2, "/debug/decisions", token)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "--decision-buffer-size")
	code, _ = get(t, s2, "/debug/endpoints", token)
	require.Equal(t, http.StatusOK, code)
}

func TestMetricsPortConfigErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("0123456789abcdef0123"), 0o600))
	short := filepath.Join(t.TempDir(), "short")
	require.NoError(t, os.WriteFile(short, []byte("abc"), 0o600))
	filter := func(h http.Handler) http.Handler { return h }
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"pprof without authentication", Config{EnablePprof: true}, "--enable-pprof exposes heap"},
		{"token and API-server auth", Config{MetricsTokenFile: file, MetricsFilter: filter}, "--metrics-token-file and --metrics-endpoint-auth both guard"},
		{"missing token file", Config{MetricsTokenFile: filepath.Join(t.TempDir(), "none")}, "--metrics-token-file: token file"},
		{"short token", Config{MetricsTokenFile: short}, "the token is 3 bytes long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.EndpointsFile = sims(t, 1)
			cfg.GRPCAddr, cfg.HealthAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
			_, err := New(cfg)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// A connection carries at most GRPCMaxConcurrentStreams streams: the next
// one waits for a free slot.
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), GRPCMaxConcurrentStreams: 2})
	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []extprocv3.ExternalProcessor_ProcessClient
	for range 2 {
		st, err := client.Process(ctx)
		require.NoError(t, err)
		require.NoError(t, st.Send(headers(false, ":path", "/v1/completions", ":method", "POST")))
		open = append(open, st)
	}
	// The server has seen both streams (their headers were read) before
	// the third is tried.
	time.Sleep(100 * time.Millisecond)
	tctx, tcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer tcancel()
	third, err := client.Process(tctx)
	if err == nil {
		err = third.Send(headers(false, ":path", "/v1/completions"))
		if err == nil {
			_, err = third.Recv()
		}
	}
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "a third stream on the connection must wait: %v", err)

	// Finishing one stream frees its slot.
	require.NoError(t, open[0].Send(reqBody(`{"model":"m","prompt":"hello"}`)))
	_, err = open[0].Recv()
	require.NoError(t, err)
	require.NoError(t, open[0].CloseSend())
	for {
		if _, err := open[0].Recv(); err != nil {
			break
		}
	}
	fourth, err := client.Process(ctx)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", strings.Split(route(t, fourth), ":")[0])
}

// A connection without streams for GRPCMaxConnectionIdle is closed by the
// server (GOAWAY): the client sees it leave READY.
func TestGRPCMaxConnectionIdle(t *testing.T) {
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), GRPCMaxConnectionIdle: 300 * time.Millisecond})
	conn := dial(t, s.GRPCAddr(), false)
	client := extprocv3.NewExternalProcessorClient(conn)
	st, err := client.Process(context.Background())
	require.NoError(t, err)
	route(t, st)
	require.NoError(t, st.CloseSend())
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	require.Equal(t, connectivity.Ready, conn.GetState())
	require.Eventually(t, func() bool { return conn.GetState() != connectivity.Ready }, 5*time.Second, 20*time.Millisecond,
		"an idle connection is closed by the server")
}

// At most MaxStreams ext_proc streams are open over every connection: one
// more fails with RESOURCE_EXHAUSTED, whichever connection it comes on,
// and is counted; a freed slot serves again.
func TestMaxStreams(t *testing.T) {
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), MaxStreams: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []extprocv3.ExternalProcessor_ProcessClient
	for range 2 {
		// A connection each: the per-connection limit does not apply.
		st, err := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false)).Process(ctx)
		require.NoError(t, err)
		require.NoError(t, st.Send(headers(false, ":path", "/v1/completions", ":method", "POST")))
		open = append(open, st)
	}
	require.Eventually(t, func() bool { return s.streams.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
	third, err := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false)).Process(ctx)
	require.NoError(t, err)
	_ = third.Send(headers(false, ":path", "/v1/completions"))
	_, err = third.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "--grpc-max-streams")
	require.Equal(t, 1.0, testutilCounter(t, s, "switchyard_extproc_streams_rejected_total"))

	require.NoError(t, open[0].CloseSend())
	for {
		if _, err := open[0].Recv(); err != nil {
			break
		}
	}
	require.Eventually(t, func() bool { return s.streams.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	fourth, err := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false)).Process(ctx)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", strings.Split(route(t, fourth), ":")[0])
}

func testutilCounter(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	fams, err := s.Registry().Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A message above GRPCMaxRecvMsgSize ends its stream with
// RESOURCE_EXHAUSTED: what a partial message can make the EPP hold is
// bounded by it.
func TestGRPCMaxRecvMsgSize(t *testing.T) {
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), GRPCMaxRecvMsgSize: 128 << 10})
	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	st, err := client.Process(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.Send(headers(false, ":path", "/v1/completions", ":method", "POST")))
	_ = st.Send(reqBody(`{"model":"m","prompt":"` + strings.Repeat("x", 200<<10) + `"}`))
	_, err = st.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	// Messages within the limit are served on a new stream.
	st2, err := client.Process(context.Background())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", strings.Split(route(t, st2), ":")[0])
}

// Decisions are recorded only where /debug/decisions can be read: with no
// guard on the metrics port (or no metrics port) the ring is not made, and
// one line at startup says why.
func TestDecisionRecordingNeedsAGuard(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("a-test-token-of-32-bytes-0123456\n"), 0o600))
	for _, tc := range []struct {
		name       string
		token      string
		metrics    string
		size       int
		wantRing   bool
		wantLogged bool
	}{
		{name: "no guard", metrics: "127.0.0.1:0", size: 64, wantLogged: true},
		{name: "no metrics port", token: file, size: 64, wantLogged: true},
		{name: "token guard", token: file, metrics: "127.0.0.1:0", size: 64, wantRing: true},
		{name: "off", metrics: "127.0.0.1:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var lines []string
			cfg := Defaults()
			cfg.EndpointsFile = sims(t, 1)
			cfg.GRPCAddr, cfg.HealthAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", tc.metrics
			cfg.MetricsTokenFile, cfg.DecisionBufferSize, cfg.EmitEndpointScores = tc.token, tc.size, true
			cfg.ShutdownGrace = 5 * time.Second
			cfg.Logger = funcr.New(func(_, args string) {
				mu.Lock()
				defer mu.Unlock()
				lines = append(lines, args)
			}, funcr.Options{})
			s, err := New(cfg)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			require.NoError(t, s.Run(ctx))
			require.Equal(t, tc.wantRing, s.decisions != nil)
			require.Equal(t, tc.wantRing, s.decisions.Size() == tc.size && tc.size > 0)
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, l := range lines {
				if strings.Contains(l, "Decision recording is off") {
					n++
				}
			}
			want := 0
			if tc.wantLogged {
				want = 1
			}
			require.Equal(t, want, n, "startup lines: %v", lines)
		})
	}
}
