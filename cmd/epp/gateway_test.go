package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// Negative bounds are usage errors (exit 2) naming the flag.
func TestGatewayFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--body-read-timeout", "-1s"}, "--body-read-timeout: must be >= 0 (0 = the default), got -1s"},
		{[]string{"--read-header-timeout", "-1s"}, "--read-header-timeout: must be >= 0"},
		{[]string{"--upstream-header-timeout", "-2m"}, "--upstream-header-timeout: must be >= 0 (0 = the default), got -2m0s"},
		{[]string{"--upstream-idle-timeout", "-1ms"}, "--upstream-idle-timeout: must be >= 0"},
		{[]string{"--max-concurrent-requests", "-5"}, "--max-concurrent-requests: must be >= 0 (0 = the default), got -5"},
		{[]string{"--streams-per-connection", "-1"}, "--streams-per-connection: must be >= 0 (0 = the default), got -1"},
		{[]string{"--max-header-bytes", "-1"}, "--max-header-bytes: must be >= 0"},
		{[]string{"--max-request-body-bytes", "-1"}, "--max-request-body-bytes: must be >= 0"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
		{[]string{"--body-read-timeout", "soon"}, `invalid value "soon" for flag -body-read-timeout`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut syncBuffer
			require.Equal(t, 2, run(append([]string{"gateway"}, tc.args...), &out, &errOut))
			require.Contains(t, errOut.String(), tc.want)
		})
	}
}

// The help lists every bound with its default.
func TestGatewayHelp(t *testing.T) {
	var out, errOut syncBuffer
	require.Equal(t, 0, run([]string{"gateway", "-h"}, &out, &errOut))
	for _, want := range []string{
		"-body-read-timeout duration", "(default 1m0s)",
		"-upstream-header-timeout duration", "(default 10m0s)",
		"-upstream-idle-timeout duration", "(default 5m0s)",
		"-max-concurrent-requests int", "(default 10000)",
		"-streams-per-connection int", "(default 100)",
		"-max-header-bytes int", "(default 65536)",
		"-read-header-timeout duration", "(default 10s)",
	} {
		require.Contains(t, errOut.String(), want)
	}
}

// hangingEPP accepts ext_proc streams and never answers, like an EPP
// buffering a body that does not end.
type hangingEPP struct {
	extprocv3.UnimplementedExternalProcessorServer
	ended chan struct{}
}

func (h *hangingEPP) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		if _, err := srv.Recv(); err != nil {
			h.ended <- struct{}{}
			return nil
		}
	}
}

// `epp gateway` serves with the bounds its flags set: a header block above
// --max-header-bytes gets 431, and a body stalled past --body-read-timeout
// gets 408 and ends the EPP's stream.
func TestGatewayServesWithBounds(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	epp := &hangingEPP{ended: make(chan struct{}, 8)}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, epp)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	defer func() { gs.Stop(); <-served }()

	var out, errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- gatewayMain(ctx, []string{"--listen", "127.0.0.1:0", "--epp-addr", lis.Addr().String(), "--epp-tls=false",
			"--max-header-bytes", "1024", "--body-read-timeout", "300ms"}, &out, &errOut)
	}()
	banner := regexp.MustCompile(`gateway listening on http://(127\.0\.0\.1:\d+)`)
	var addr string
	require.Eventually(t, func() bool {
		if m := banner.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, 10*time.Second, 10*time.Millisecond, "no banner: %s", errOut.String())

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/models", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 8<<10))
	resp, err := client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{\"model\":")
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, string(b))
	require.Equal(t, "request_timeout", resp.Header.Get("X-Switchyard-Reason"))
	select {
	case <-epp.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the EPP's stream did not end after the body read timeout")
	}

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("epp gateway did not stop")
	}
}
