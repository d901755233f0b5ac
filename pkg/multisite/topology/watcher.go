package topology

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/internal/filewatch"
)

// Reload results, the values of the result label of
// switchyard_site_topology_reloads_total.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
)

// Options configure a Watcher.
type Options struct {
	// Local is the EPP's own site; required.
	Local Local
	// File is the topology file (--site-topology-file), watched; "" means
	// none (the topology is then the local site and, in Kubernetes mode,
	// the sites of InferencePoolImport status).
	File string
	// Logger receives reload logs. The zero value discards.
	Logger logr.Logger
	// Registerer receives the watcher's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Debounce and Poll tune the file watch (filewatch's defaults when 0).
	Debounce, Poll time.Duration
}

// Watcher keeps the current topology: it merges the topology file, which
// it watches, with the exporting clusters an InferencePoolImport watch
// reports (SetExporting), publishes every change as a new immutable
// *Topology (one atomic load to read) and calls the OnChange functions.
// All methods are safe for concurrent use.
type Watcher struct {
	opts Options
	log  logr.Logger

	cur atomic.Pointer[Topology]

	mu          sync.Mutex // guards the inputs and publishing
	file        []Site
	exporting   []string
	version     uint64
	lastData    []byte
	lastReadErr string
	lastSkipped []string
	fns         []func(*Topology)

	reloads *prometheus.CounterVec
	sites   prometheus.Gauge
}

// NewWatcher returns a watcher whose topology is the local site alone
// until Load reads the file.
func NewWatcher(opts Options) (*Watcher, error) {
	if err := opts.Local.Validate(); err != nil {
		return nil, err
	}
	w := &Watcher{opts: opts, log: opts.Logger}
	if w.log.GetSink() == nil {
		w.log = logr.Discard()
	}
	w.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_site_topology_reloads_total",
		Help: "Loads of the site topology file, by result (success, or failure: the file was refused and the last good topology kept).",
	}, []string{"result"})
	w.sites = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_site_topology_sites",
		Help: "Sites in the current site topology, the local site included.",
	})
	w.reloads.WithLabelValues(ResultSuccess)
	w.reloads.WithLabelValues(ResultFailure)
	if reg := opts.Registerer; reg != nil {
		for _, c := range []prometheus.Collector{w.reloads, w.sites} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("site topology metrics: %w", err)
			}
		}
	}
	w.mu.Lock()
	w.publishLocked()
	w.mu.Unlock()
	return w, nil
}

// Topology returns the current topology: one atomic load, never nil.
func (w *Watcher) Topology() *Topology { return w.cur.Load() }

// OnChange registers fn to be called with every new topology, in order,
// after it is published; fn must be quick and must not call back into
// the watcher's setters.
func (w *Watcher) OnChange(fn func(*Topology)) {
	w.mu.Lock()
	w.fns = append(w.fns, fn)
	w.mu.Unlock()
}

// Load reads the topology file, if any, and publishes the result; its
// error names the file and every invalid field (at start-up it should
// stop the process).
func (w *Watcher) Load() error {
	if w.opts.File == "" {
		return nil
	}
	_, err := w.reload(true)
	return err
}

// Run follows the topology file until ctx ends (see filewatch: the
// directory is watched, so Kubernetes ConfigMap symlink swaps are seen,
// and the file is also re-read every 10 s). A file that cannot be read or
// is invalid is refused with an error log and a failure count; the last
// good topology stays. Without a file Run returns at once.
func (w *Watcher) Run(ctx context.Context) {
	if w.opts.File == "" {
		return
	}
	opts := filewatch.Options{Debounce: w.opts.Debounce, Poll: w.opts.Poll, Logger: w.log.WithValues("file", w.opts.File)}
	if err := filewatch.Run(ctx, []string{w.opts.File}, opts, w.reloadForWatch); err != nil {
		w.log.Error(err, "Cannot watch the site topology file")
	}
}

func (w *Watcher) reloadForWatch() ([32]byte, bool) {
	applied, err := w.reload(false)
	switch {
	case err != nil:
		w.log.Error(err, "Site topology file refused; keeping the last good topology")
	case applied:
		w.log.Info("Site topology reloaded", "sites", w.Topology().Len())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastReadErr != "" || w.lastData == nil {
		return [32]byte{}, false
	}
	return filewatch.Sum(w.lastData), true
}

// reload reads and applies the file; unless force is set, content equal
// to the last content tried is skipped. It reports whether it applied a
// new file content.
func (w *Watcher) reload(force bool) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := readFile(w.opts.File)
	if err != nil {
		if !force && w.lastReadErr == err.Error() {
			return false, nil
		}
		w.lastData, w.lastReadErr = nil, err.Error()
		w.reloads.WithLabelValues(ResultFailure).Inc()
		return false, fmt.Errorf("site topology file %s: %w", w.opts.File, err)
	}
	w.lastReadErr = ""
	if !force && w.lastData != nil && string(data) == string(w.lastData) {
		return false, nil
	}
	w.lastData = data
	sites, err := Parse(data, w.opts.Local)
	if err != nil {
		w.reloads.WithLabelValues(ResultFailure).Inc()
		return false, fmt.Errorf("site topology file %s: %w", w.opts.File, err)
	}
	w.file = sites
	w.reloads.WithLabelValues(ResultSuccess).Inc()
	w.publishLocked()
	return true, nil
}

// SetExporting sets the clusters that export the EPP's pool, as
// InferencePoolImport status lists them (pkg/multisite/topology/poolimport
// calls it), and publishes the topology if it changed.
func (w *Watcher) SetExporting(clusters []string) {
	c := slices.Clone(clusters)
	slices.Sort(c)
	c = slices.Compact(c)
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Equal(c, w.exporting) {
		return
	}
	w.exporting = c
	w.publishLocked()
}

// publishLocked builds the topology from the inputs and publishes it when
// it differs from the current one.
func (w *Watcher) publishLocked() {
	t, skipped := Build(w.opts.Local, w.file, w.exporting)
	if !slices.Equal(skipped, w.lastSkipped) {
		for _, msg := range skipped {
			w.log.Info("InferencePoolImport cluster left out of the site topology", "reason", msg)
		}
		w.lastSkipped = skipped
	}
	if cur := w.cur.Load(); cur != nil && cur.Equal(t) {
		return
	}
	w.version++
	t.Version = w.version
	w.cur.Store(t)
	w.sites.Set(float64(t.Len()))
	for _, s := range t.sites {
		if !s.Routable() {
			w.log.V(1).Info("Site has no gateway address: its load is tracked, requests cannot be routed to it until the topology file gives one", "site", s.Name, "cluster", s.Cluster)
		}
	}
	for _, fn := range w.fns {
		fn(t)
	}
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, errors.New("the file is larger than 1 MiB")
	}
	return data, nil
}
