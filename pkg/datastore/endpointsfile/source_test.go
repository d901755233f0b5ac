package endpointsfile

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
)

const (
	fileA  = "endpoints:\n- {name: a, address: 127.0.0.1, port: 8001}\n"
	fileAB = "endpoints:\n- {name: a, address: 127.0.0.1, port: 8001}\n- {name: b, address: 127.0.0.1, port: 8002}\n"
	fileB  = "endpoints:\n- {name: b, address: 127.0.0.1, port: 8002}\n"
	broken = "endpoints:\n- {name: a, address: 127.0.0.1, port: 0}\n"
)

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, prefix+" "+args)
		l.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

func (l *logSink) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

type fixture struct {
	dir, path string
	store     *datastore.Store
	src       *Source
	reg       *prometheus.Registry
	logs      *logSink
}

func newFixture(t *testing.T, content string) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), reg: prometheus.NewRegistry(), logs: &logSink{}}
	f.path = filepath.Join(f.dir, "endpoints.yaml")
	if content != "" {
		require.NoError(t, os.WriteFile(f.path, []byte(content), 0o644))
	}
	f.store = datastore.New(datastore.Options{})
	f.src = NewSource(f.path, f.store, f.logs.logger(), f.reg)
	return f
}

// run runs the source until the test ends.
func (f *fixture) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.src.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	// Let the watch start before the test edits the file.
	time.Sleep(200 * time.Millisecond)
}

func (f *fixture) names() []string {
	var out []string
	for _, e := range f.store.Snapshot().All() {
		out = append(out, e.Name())
	}
	return out
}

func (f *fixture) reloads(result string) float64 {
	var m dto.Metric
	if err := f.src.reloads.WithLabelValues(result).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// writeAtomic writes content to a temporary file and renames it over path.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// pickup bounds how long a change may take to reach the store; it is
// usually ~100 ms, the margin is for loaded CI machines.
const pickup = 5 * time.Second

func TestLoad(t *testing.T) {
	f := newFixture(t, fileAB)
	require.NoError(t, f.src.Load())
	assert.Equal(t, []string{"a", "b"}, f.names())
	assert.True(t, f.store.Snapshot().Synced)
	assert.Equal(t, 1.0, f.reloads(ResultSuccess))
	assert.Equal(t, 0.0, f.reloads(ResultFailure))
}

// TestLoadNoScrape: an endpoint with scrape: false reaches the store as
// one that is not scraped and never stale, and a reload that turns its
// scraping on makes it a scrape target again.
func TestLoadNoScrape(t *testing.T) {
	f := newFixture(t, "endpoints:\n- {name: a, address: 127.0.0.1, port: 8001}\n- {name: hosted, address: 127.0.0.1, port: 8002, scrape: false}\n")
	f.store.SetScrapingEnabled(true)
	require.NoError(t, f.src.Load())
	targets := func() []string {
		ts, _ := f.store.Targets()
		var out []string
		for _, tg := range ts {
			out = append(out, tg.Spec.Name)
		}
		return out
	}
	assert.Equal(t, []string{"a"}, targets())
	sn := f.store.Snapshot()
	var ready []string
	for _, e := range sn.Routable() {
		ready = append(ready, e.Name())
	}
	assert.Equal(t, []string{"a", "hosted"}, ready, "a is stale until scraped, and fails open beside hosted, which is never stale")
	assert.True(t, sn.RoutableFailOpen())
	st, _ := f.store.ScrapeStatus("hosted")
	assert.True(t, st.Fresh, "hosted is never stale")
	f.run(t)
	writeAtomic(t, f.path, "endpoints:\n- {name: a, address: 127.0.0.1, port: 8001}\n- {name: hosted, address: 127.0.0.1, port: 8002, scrape: true}\n")
	require.Eventually(t, func() bool { return slices.Equal(targets(), []string{"a", "hosted"}) }, pickup, 10*time.Millisecond)
}

func TestLoadErrors(t *testing.T) {
	f := newFixture(t, "")
	err := f.src.Load()
	require.ErrorContains(t, err, "endpoints file "+f.path)
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.False(t, f.store.Snapshot().Synced)

	require.NoError(t, os.WriteFile(f.path, []byte(broken), 0o644))
	err = f.src.Load()
	require.ErrorContains(t, err, "endpoints[0].port: must be 1..65535, got 0")
	assert.Empty(t, f.names())
	assert.False(t, f.store.Snapshot().Synced)
	assert.Equal(t, 2.0, f.reloads(ResultFailure))

	require.NoError(t, os.WriteFile(f.path, []byte(strings.Repeat("#", MaxFileBytes+1)), 0o644))
	require.ErrorContains(t, f.src.Load(), "larger than 16 MiB")
}

func TestWatchEditInPlace(t *testing.T) {
	f := newFixture(t, fileA)
	require.NoError(t, f.src.Load())
	st := f.store.Stats("a")
	f.run(t)
	require.NoError(t, os.WriteFile(f.path, []byte(fileAB), 0o644))
	require.Eventually(t, func() bool { return slices.Equal(f.names(), []string{"a", "b"}) }, pickup, 5*time.Millisecond)
	assert.Same(t, st, f.store.Stats("a"), "an unchanged endpoint keeps its stats across reloads")
	require.Eventually(t, func() bool { return f.logs.count("Endpoints file reloaded") == 1 }, pickup, 5*time.Millisecond)
}

func TestWatchAtomicRename(t *testing.T) {
	f := newFixture(t, fileA)
	require.NoError(t, f.src.Load())
	f.run(t)
	writeAtomic(t, f.path, fileB)
	require.Eventually(t, func() bool { return slices.Equal(f.names(), []string{"b"}) }, pickup, 5*time.Millisecond)
	writeAtomic(t, f.path, fileAB)
	require.Eventually(t, func() bool { return slices.Equal(f.names(), []string{"a", "b"}) }, pickup, 5*time.Millisecond)
}

// TestWatchConfigMapSwap mimics how the kubelet updates a mounted
// ConfigMap: the file is a symlink through "..data", which is swapped
// atomically to a new timestamped directory.
func TestWatchConfigMapSwap(t *testing.T) {
	f := newFixture(t, "")
	writeVersion := func(name, content string) {
		require.NoError(t, os.Mkdir(filepath.Join(f.dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(f.dir, name, "endpoints.yaml"), []byte(content), 0o644))
		tmp := filepath.Join(f.dir, "..data_tmp")
		require.NoError(t, os.Symlink(name, tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(f.dir, "..data")))
	}
	writeVersion("..2026_01_01_v1", fileA)
	require.NoError(t, os.Symlink(filepath.Join("..data", "endpoints.yaml"), f.path))
	require.NoError(t, f.src.Load())
	assert.Equal(t, []string{"a"}, f.names())
	f.run(t)
	writeVersion("..2026_01_01_v2", fileB)
	require.Eventually(t, func() bool { return slices.Equal(f.names(), []string{"b"}) }, pickup, 5*time.Millisecond)
	require.NoError(t, os.RemoveAll(filepath.Join(f.dir, "..2026_01_01_v1")))
}

func TestBrokenEditKeepsLastGoodSet(t *testing.T) {
	f := newFixture(t, fileAB)
	require.NoError(t, f.src.Load())
	f.run(t)
	writeAtomic(t, f.path, broken)
	require.Eventually(t, func() bool { return f.reloads(ResultFailure) == 1 }, pickup, 5*time.Millisecond)
	assert.Equal(t, []string{"a", "b"}, f.names())
	assert.True(t, f.store.Snapshot().Synced)
	require.Eventually(t, func() bool { return f.logs.count("Endpoints file refused") == 1 }, pickup, 5*time.Millisecond)
	assert.Equal(t, 1, f.logs.count("endpoints[0].port: must be 1..65535, got 0"))

	// Deleting the file is refused too; recreating it is picked up.
	require.NoError(t, os.Remove(f.path))
	require.Eventually(t, func() bool { return f.reloads(ResultFailure) == 2 }, pickup, 5*time.Millisecond)
	assert.Equal(t, []string{"a", "b"}, f.names())
	writeAtomic(t, f.path, fileB)
	require.Eventually(t, func() bool { return slices.Equal(f.names(), []string{"b"}) }, pickup, 5*time.Millisecond)
	assert.Equal(t, 2.0, f.reloads(ResultSuccess))
}

// TestRunWithoutLoad: a source whose file appears later loads it then.
func TestRunWithoutLoad(t *testing.T) {
	f := newFixture(t, "")
	f.run(t)
	assert.False(t, f.store.Snapshot().Synced)
	writeAtomic(t, f.path, fileA)
	require.Eventually(t, func() bool { return f.store.Snapshot().Synced }, pickup, 5*time.Millisecond)
	assert.Equal(t, []string{"a"}, f.names())
}

// TestPoll: without events (the watch is on another directory), the poll
// picks changes up.
func TestPoll(t *testing.T) {
	f := newFixture(t, fileA)
	f.src.poll = 20 * time.Millisecond
	require.NoError(t, f.src.Load())
	target := filepath.Join(t.TempDir(), "real.yaml")
	require.NoError(t, os.WriteFile(target, []byte(fileA), 0o644))
	require.NoError(t, os.Remove(f.path))
	require.NoError(t, os.Symlink(target, f.path))
	f.run(t)
	require.NoError(t, os.WriteFile(target, []byte(fileB), 0o644))
	require.Eventually(t, func() bool { return slices.Equal(f.names(), []string{"b"}) }, pickup, 5*time.Millisecond)
}

func TestSourceMetricsLint(t *testing.T) {
	f := newFixture(t, fileA)
	require.NoError(t, f.src.Load())
	// A second source on the same registry reuses the collectors.
	NewSource(f.path, f.store, logr.Discard(), f.reg)
	families, err := f.reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, fam := range families {
		names = append(names, fam.GetName())
	}
	assert.ElementsMatch(t, []string{"switchyard_endpoints_file_reloads_total", "switchyard_endpoints_file_last_reload_success_timestamp_seconds"}, names)
	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
}
