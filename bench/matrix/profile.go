//go:build bench

package matrix

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// profiler fetches CPU profiles from a Switchyard EPP started with its
// args: --enable-pprof behind a random static metrics token (instead of
// Kubernetes TokenReview) on the chart's
// metrics port (127.0.0.1:9090). A nil profiler does nothing.
type profiler struct {
	dir, token string
	args       []string
}

func newProfiler(t *testing.T, dir string) *profiler {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	p := &profiler{dir: dir, token: hex.EncodeToString(b[:])}
	tok := filepath.Join(t.TempDir(), "metrics-token")
	if err := os.WriteFile(tok, []byte(p.token), 0o600); err != nil {
		t.Fatal(err)
	}
	p.args = []string{"--enable-pprof", "--metrics-endpoint-auth=false", "--metrics-token-file", tok}
	return p
}

// start begins a CPU profile of d written to dir/name; the returned
// function waits for it.
func (p *profiler) start(t *testing.T, name string, d time.Duration) func() {
	if p == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.fetch(filepath.Join(p.dir, name), d); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}

func (p *profiler) fetch(path string, d time.Duration) error {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:9090/debug/pprof/profile?seconds=%d", secs), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := (&http.Client{Timeout: d + 30*time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
