package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// binDir holds the binaries TestMain builds from this checkout.
var binDir string

func buildBinaries() (string, error) {
	dir, err := os.MkdirTemp("", "switchyard-e2e-")
	if err != nil {
		return "", err
	}
	for _, pkg := range []string{"epp", "modelsim", "site-relay"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, pkg), "./cmd/"+pkg)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			return dir, fmt.Errorf("go build ./cmd/%s: %v\n%s", pkg, err, out)
		}
	}
	return dir, nil
}

// proc is a child process whose output the test reads.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	done chan struct{}
}

// startProc starts a binary of binDir (or at an absolute path); it is
// killed when the test ends.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, name, bin, nil, args...)
}

// startProcEnv is startProc with more environment variables (KEY=value).
func startProcEnv(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	path := bin
	if !filepath.IsAbs(bin) { // a binary of binDir; an absolute path runs as it is
		path = filepath.Join(binDir, bin)
	}
	p := &proc{name: name, cmd: exec.Command(path, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		_ = pw.Close()
	}()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			for _, l := range p.lines() {
				t.Logf("%s: %s", name, l)
			}
		}
	})
	return p
}

// stop signals the process and waits for its output to end.
func (p *proc) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return // already exited
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.out...)
}

// waitFor returns the first submatch of re in the output.
func (p *proc) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range p.lines() {
			if m := re.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before printing %s:\n%s", p.name, re, strings.Join(p.lines(), "\n"))
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not print %s in 30s:\n%s", p.name, re, strings.Join(p.lines(), "\n"))
	return ""
}

// jsonLogs returns the process's JSON log lines whose msg is msg.
func (p *proc) jsonLogs(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range p.lines() {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// freeLoopbackAddr returns a random address of 127.0.0.0/8 (outside
// 127.0.0.x) and a port free on it a moment ago.
func freeLoopbackAddr(t *testing.T) (string, int) {
	t.Helper()
	ip := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 1+rand.IntN(254))
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return ip, l.Addr().(*net.TCPAddr).Port
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// scrape reads a Prometheus text endpoint.
func scrape(ctx context.Context, url string) (map[string]*familyValues, error) {
	return scrapeWithToken(ctx, url, "")
}

// scrapeWithToken reads a Prometheus text endpoint with a bearer token.
func scrapeWithToken(ctx context.Context, url, token string) (map[string]*familyValues, error) {
	fams, err := fetchFamilies(ctx, url, token)
	if err != nil {
		return nil, err
	}
	out := map[string]*familyValues{}
	for name, f := range fams {
		fv := &familyValues{}
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				fv.sum += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				fv.sum += m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				fv.sum += m.GetUntyped().GetValue()
			case m.GetHistogram() != nil:
				fv.sum += m.GetHistogram().GetSampleSum()
				fv.count += m.GetHistogram().GetSampleCount()
			}
		}
		out[name] = fv
	}
	return out, nil
}

// familyValues sums a family over its series (histograms: sum and count).
type familyValues struct {
	sum   float64
	count uint64
}

// fetchFamilies GETs a Prometheus text endpoint (with a bearer token when
// token is set) and parses its metric families.
func fetchFamilies(ctx context.Context, url, token string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %v", url, err)
	}
	return fams, nil
}
