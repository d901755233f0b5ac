package e2e

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
)

// freezer is a TCP proxy to the API server that can stop carrying bytes
// while keeping every connection open: a network partition as the leader
// sees it, where calls hang instead of failing.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &freezer{ln: ln, target: target}
	f.cond = sync.NewCond(&f.mu)
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *freezer) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, up)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(up, c)
		go f.pipe(c, up)
	}
}

// pipe copies src to dst, holding every chunk while frozen.
func (f *freezer) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			for f.frozen {
				f.cond.Wait()
			}
			f.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			return
		}
	}
}

func (f *freezer) set(frozen bool) {
	f.mu.Lock()
	f.frozen = frozen
	f.cond.Broadcast()
	f.mu.Unlock()
}

func (f *freezer) close() {
	_ = f.ln.Close()
	f.set(false)
	f.mu.Lock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// kubeconfigVia writes a copy of kubeconfig whose server is reached
// through addr (the API server's certificate names 127.0.0.1).
func kubeconfigVia(t *testing.T, kubeconfig, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	require.NoError(t, err)
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	path := t.TempDir() + "/kubeconfig"
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

// A leader cut off by a partition (its API calls hang, nothing fails)
// stops being ready before the lease can pass to the standby, so the two
// are never ready at once; when the partition heals it stays a standby.
func TestLeaderElectionPartition(t *testing.T) {
	env, ns := haPool(t, "partition", "127.10.5.1")
	api, err := url.Parse(env.Config.Host)
	require.NoError(t, err)
	proxy := startFreezer(t, api.Host)

	const (
		lease = 6 * time.Second
		renew = 3 * time.Second
		retry = 500 * time.Millisecond
	)
	replica := func(name, kubeconfig string) string {
		_, health := haReplica(t, name, ns, kubeconfig, leaseTimes{lease, renew, retry})
		return health
	}
	a := replica("epp-a", kubeconfigVia(t, env.Kubeconfig, proxy.ln.Addr().String()))
	require.Eventually(t, func() bool { return serving(t, a, "readiness") }, 30*time.Second, 50*time.Millisecond, "epp-a leads")
	b := replica("epp-b", env.Kubeconfig)
	time.Sleep(2 * retry)
	require.True(t, serving(t, a, "readiness"))
	require.False(t, serving(t, b, "readiness"))

	proxy.set(true)
	start := time.Now()
	var aDown, bUp time.Duration
	for time.Since(start) < lease+10*time.Second && bUp == 0 {
		ra, rb := serving(t, a, "readiness"), serving(t, b, "readiness")
		require.False(t, ra && rb, "both replicas ready %s into the partition", time.Since(start).Round(time.Millisecond))
		if !ra && aDown == 0 {
			aDown = time.Since(start)
		}
		if rb {
			bUp = time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotZero(t, aDown, "the cut-off leader stepped down")
	require.NotZero(t, bUp, "the standby took over")
	require.Less(t, aDown, bUp)
	t.Logf("partition: leader not ready after %s, standby ready after %s (renew deadline %s, lease %s)",
		aDown.Round(time.Millisecond), bUp.Round(time.Millisecond), renew, lease)

	proxy.set(false)
	for range 20 {
		require.False(t, serving(t, a, "readiness"), "the healed replica stays a standby")
		require.True(t, serving(t, b, "readiness"))
		time.Sleep(100 * time.Millisecond)
	}
}
