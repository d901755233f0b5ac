package gateway

import (
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// blackHole returns a loopback ip:port that accepts no connection: a
// listening socket with a backlog of 0 whose accept queue is filled, so
// the kernel drops further SYNs and a connect hangs, as with a site that
// went down behind a silent network.
func blackHole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the accept queue until a connect hangs.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { _ = c.Close() })
		if i > 64 {
			t.Skip("the kernel keeps accepting connections on a full backlog; no black hole on this machine")
		}
	}
}

// TestG58_ASiteThatWentDownWaitsOutTheConnectTimeout: a request already
// sent to a site whose gateway stopped answering waits out the 2 s
// connect timeout (DefaultConnectTimeout) and fails with 503
// upstream_connect_failure; it is not retried on another site (the EPP
// named one destination: retrying elsewhere is future work, grid#419).
func TestG58_ASiteThatWentDownWaitsOutTheConnectTimeout(t *testing.T) {
	hole := blackHole(t)
	h := newHarness(t, fakeConfig{dest: hole}, nil)
	start := time.Now()
	resp := post(t, h, "/v1/completions", []byte(`{"model":"m","prompt":"p"}`), nil)
	elapsed := time.Since(start)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(ReasonHeader) != ReasonUpstreamConnectFailure {
		t.Fatalf("got %d reason %q body %s, want 503 %s", resp.StatusCode, resp.Header.Get(ReasonHeader), b, ReasonUpstreamConnectFailure)
	}
	if elapsed < DefaultConnectTimeout-100*time.Millisecond || elapsed > DefaultConnectTimeout+3*time.Second {
		t.Errorf("failed after %s, want about the %s connect timeout", elapsed, DefaultConnectTimeout)
	}
	if got := counterValue(h.gw.metrics.attempts[attemptConnectFailure]); got != 1 {
		t.Errorf("upstream_attempts_total{result=connect_failure} = %v, want 1 (no retry elsewhere)", got)
	}
	if got := counterValue(h.gw.metrics.fallbackWalks); got != 0 {
		t.Errorf("fallback_walks_total = %v, want 0", got)
	}
}
