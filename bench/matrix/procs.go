//go:build bench

package matrix

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the folder of the product's go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/switchyard-ai/switchyard\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no Switchyard go.mod above the working directory")
		}
		dir = parent
	}
}

// build compiles the product's EPP into dir and GIE's v1.5.0 EPP (from
// the peers module, cached in bin/) and returns their paths.
func build(t testing.TB, root, dir string) (epp, gie string) {
	t.Helper()
	epp = filepath.Join(dir, "epp")
	run(t, root, "go", "build", "-o", epp, "./cmd/epp")
	gie = filepath.Join(root, "bin", "gie-epp-v1.5.0")
	if _, err := os.Stat(gie); err != nil {
		run(t, filepath.Join(root, "bench", "peers"), "go", "build", "-mod=mod", "-o", gie, "sigs.k8s.io/gateway-api-inference-extension/cmd/epp")
	}
	return epp, gie
}

func run(t testing.TB, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// proc is a started EPP.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs bin with args and env; its output goes to a log file. The
// process is stopped (SIGTERM, then SIGKILL after 5 s) when the test ends
// or by stop.
func start(t testing.TB, name, bin string, env, args []string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Env = append(os.Environ(), env...)
	// A driver killed before its cleanups leaves no process holding the
	// benchmark's ports.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(p.stop)
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process ended, with the end of its log.
func (p *proc) exited() (bool, string) {
	select {
	case <-p.done:
		b, _ := os.ReadFile(p.log)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return true, string(b)
	default:
		return false, ""
	}
}

// sims starts n modelsim servers (metrics and the OpenAI API) on
// 127.10.x.y:port in a simfleet process (bench/cmd/simfleet), not in this
// one: the load generator runs here, and serving the EPP's scrapes in its
// process would stall its measurements. The fleet stops when the test
// ends.
func sims(t testing.TB, fleet string, n, port int) (*proc, []string) {
	t.Helper()
	p := start(t, "simfleet", fleet, nil, []string{"-n", fmt.Sprint(n), "-port", fmt.Sprint(port), "-time-scale", "0.01"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, _ := os.ReadFile(p.log); strings.Contains(string(b), "ready\n") {
			break
		}
		if ended, out := p.exited(); ended {
			t.Fatalf("simfleet exited: %s", out)
		}
		if time.Now().After(deadline) {
			t.Fatal("simfleet not ready after 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	addrs := make([]string, n)
	for i := range n {
		addrs[i] = FleetIP(i)
	}
	return p, addrs
}
