package topology

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func names(sites []Site) []string {
	out := make([]string, len(sites))
	for i, s := range sites {
		out[i] = s.Name + "/" + s.Cluster + "/" + s.Source
	}
	return out
}

func TestBuild(t *testing.T) {
	file, err := Parse([]byte(threeSites), local)
	require.NoError(t, err)

	// The file alone: the local entry gives the local site its models.
	top, skipped := Build(local, file, nil)
	assert.Empty(t, skipped)
	assert.Equal(t, []string{"site-a/cluster-a/local", "site-b/cluster-b.example/file", "site-c/cluster-c/file"}, names(top.Sites()))
	assert.True(t, top.Local().Local)
	assert.Equal(t, []string{"llama"}, top.Local().Models)
	assert.True(t, top.HasCluster("site-b", "cluster-b.example"))
	assert.False(t, top.HasCluster("site-b", "cluster-c"))
	assert.False(t, top.Has("site-z"))
	b, ok := top.Site("site-b")
	require.True(t, ok)
	assert.True(t, b.Serves("mistral"))
	assert.False(t, b.Serves("phi"))
	c, _ := top.Site("site-c")
	assert.True(t, c.Serves("anything"), "no models listed: every model")
	var serving []string
	for _, s := range top.Serving("mistral") {
		serving = append(serving, s.Name)
	}
	assert.Equal(t, []string{"site-b", "site-c"}, serving)

	// InferencePoolImport clusters: known ones are marked, others become
	// sites without a gateway, bad names are left out.
	top, skipped = Build(local, file, []string{"cluster-c", "cluster-d", "cluster-a", "Bad_Cluster", "cluster-d", "a.b"})
	assert.Equal(t, []string{"cluster-d/cluster-d/inferencepoolimport", "site-a/cluster-a/local", "site-b/cluster-b.example/file", "site-c/cluster-c/file"}, names(top.Sites()))
	assert.Len(t, skipped, 2)
	assert.Contains(t, skipped[0], `"Bad_Cluster"`)
	assert.Contains(t, skipped[1], `"a.b"`)
	d, _ := top.Site("cluster-d")
	assert.True(t, d.Exported)
	assert.False(t, d.Routable(), "no gateway address")
	assert.True(t, top.Local().Routable())
	cc, _ := top.Site("site-c")
	assert.True(t, cc.Exported)
	bb, _ := top.Site("site-b")
	assert.False(t, bb.Exported)
	assert.True(t, top.Local().Exported)

	// Without a file: the local site, and what the import adds.
	top, _ = Build(local, nil, nil)
	assert.Equal(t, []string{"site-a/cluster-a/local"}, names(top.Sites()))

	// A cluster named like an existing site is left out.
	top, skipped = Build(local, nil, []string{"site-a"})
	assert.Equal(t, 1, top.Len())
	require.Len(t, skipped, 1)
	assert.Contains(t, skipped[0], "already exists")

	// The number of sites is bounded.
	var many []string
	for i := range 2 * MaxSites {
		many = append(many, "c"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	top, skipped = Build(local, nil, many)
	assert.Equal(t, MaxSites, top.Len())
	assert.Len(t, skipped, 2*MaxSites-(MaxSites-1))
}

func TestLocalValidate(t *testing.T) {
	require.NoError(t, local.Validate())
	err := Local{Site: "A", Cluster: ""}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--site-name: ")
	assert.Contains(t, err.Error(), "--site-cluster: must not be empty")
}

// lines counts log lines at verbosity 0 containing a substring.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) logger() funcr.Options { return funcr.Options{} }

func (l *lines) add(prefix, args string) {
	l.mu.Lock()
	l.all = append(l.all, prefix+" "+args)
	l.mu.Unlock()
}

func (l *lines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.all {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(data), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// TestWatcher: the file is loaded, followed, and a bad edit keeps the last
// good topology; InferencePoolImport clusters merge in; every change is
// published with a higher version and reported to OnChange.
func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "topology.yaml")
	writeAtomic(t, path, threeSites)
	var log lines
	reg := prometheus.NewRegistry()
	w, err := NewWatcher(Options{Local: local, File: path, Logger: funcr.New(log.add, log.logger()), Registerer: reg, Debounce: 10 * time.Millisecond, Poll: 50 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, 1, w.Topology().Len(), "the local site before Load")
	var (
		mu   sync.Mutex
		seen []uint64
	)
	w.OnChange(func(top *Topology) { mu.Lock(); seen = append(seen, top.Version); mu.Unlock() })
	require.NoError(t, w.Load())
	top := w.Topology()
	assert.Equal(t, 3, top.Len())
	assert.Equal(t, uint64(2), top.Version)
	assert.Equal(t, 3.0, value(w.sites))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// A bad edit is refused, once, and the topology stays.
	writeAtomic(t, path, "sites: [{name: site-b}]\n")
	require.Eventually(t, func() bool { return value(w.reloads.WithLabelValues(ResultFailure)) == 1 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(150 * time.Millisecond) // a few polls
	assert.Equal(t, 1.0, value(w.reloads.WithLabelValues(ResultFailure)), "the same bad content is refused once")
	assert.Equal(t, 1, log.count("Site topology file refused"))
	assert.Same(t, top, w.Topology())

	// A good edit takes over.
	writeAtomic(t, path, "sites:\n- {name: site-b, cluster: cluster-b, gateway: \"10.0.0.2:443\"}\n")
	require.Eventually(t, func() bool { return w.Topology().Len() == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.False(t, w.Topology().Has("site-c"))

	// Exporting clusters merge in; the same set again publishes nothing.
	v := w.Topology().Version
	w.SetExporting([]string{"cluster-b", "cluster-x"})
	assert.Equal(t, v+1, w.Topology().Version)
	assert.True(t, w.Topology().Has("cluster-x"))
	w.SetExporting([]string{"cluster-x", "cluster-b", "cluster-b"})
	assert.Equal(t, v+1, w.Topology().Version)
	w.SetExporting(nil)
	assert.False(t, w.Topology().Has("cluster-x"))

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seen)
	for i := 1; i < len(seen); i++ {
		assert.Greater(t, seen[i], seen[i-1])
	}
	assert.Equal(t, w.Topology().Version, seen[len(seen)-1])
}

func TestWatcherErrors(t *testing.T) {
	_, err := NewWatcher(Options{Local: Local{Site: "x"}})
	require.ErrorContains(t, err, "--site-cluster")

	w, err := NewWatcher(Options{Local: local, File: filepath.Join(t.TempDir(), "missing.yaml")})
	require.NoError(t, err)
	require.ErrorContains(t, w.Load(), "no such file")

	path := filepath.Join(t.TempDir(), "t.yaml")
	writeAtomic(t, path, "sites: [{name: b, cluster: c, gateway: \"b:1\", extra: 1}]\n")
	w, err = NewWatcher(Options{Local: local, File: path})
	require.NoError(t, err)
	err = w.Load()
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), `sites[0].extra: unknown field "extra"`)

	// Without a file, Load and Run do nothing.
	w, err = NewWatcher(Options{Local: local})
	require.NoError(t, err)
	require.NoError(t, w.Load())
	w.Run(t.Context())
	assert.Equal(t, 1, w.Topology().Len())
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}
