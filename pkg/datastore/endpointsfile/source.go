package endpointsfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/internal/promreg"
	"github.com/switchyard-ai/switchyard/pkg/internal/filewatch"
)

// MaxFileBytes bounds the size of an endpoints file.
const MaxFileBytes = 16 << 20

// MaxEndpoints bounds the endpoints of one file: each is scraped by its
// own goroutine, and no real pool comes near it.
const MaxEndpoints = 10000

// Defaults of the file watch.
const (
	// DefaultDebounce is how long the source waits after the last change
	// event before it reloads, so that an editor's write-rename-chmod
	// sequence or a ConfigMap update causes one reload.
	DefaultDebounce = 100 * time.Millisecond
	// DefaultPollInterval is how often the file is re-read even without an
	// event, as a safety net (e.g. a symlink into a directory that is not
	// watched).
	DefaultPollInterval = 10 * time.Second
)

// Reload results, the values of the result label.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
)

// Source loads an endpoints file into a datastore.Store and keeps the store
// in sync with the file.
type Source struct {
	path  string
	store *datastore.Store
	log   logr.Logger

	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge

	debounce time.Duration
	poll     time.Duration

	mu          sync.Mutex
	lastData    []byte // the content last tried, good or not
	lastReadErr string // the last read error, to report it once
	loaded      bool   // a good content has been applied
}

// NewSource returns a source for the file at path. Its metrics,
// switchyard_endpoints_file_reloads_total{result} and
// switchyard_endpoints_file_last_reload_success_timestamp_seconds, are
// registered on reg (nil registers nothing).
func NewSource(path string, store *datastore.Store, logger logr.Logger, reg prometheus.Registerer) *Source {
	s := &Source{
		path:     path,
		store:    store,
		log:      logger.WithValues("path", path),
		debounce: DefaultDebounce,
		poll:     DefaultPollInterval,
	}
	var err error
	s.reloads, err = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard",
		Name:      "endpoints_file_reloads_total",
		Help:      "Loads of the endpoints file, by result (success, or failure: the file was refused and the last good endpoint set kept).",
	}, []string{"result"}))
	if err != nil {
		s.log.Error(err, "Cannot register the endpoints file metrics")
	}
	s.lastSuccess, err = promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "switchyard",
		Name:      "endpoints_file_last_reload_success_timestamp_seconds",
		Help:      "Unix time of the last successful load of the endpoints file.",
	}))
	if err != nil {
		s.log.Error(err, "Cannot register the endpoints file metrics")
	}
	s.reloads.WithLabelValues(ResultSuccess)
	s.reloads.WithLabelValues(ResultFailure)
	return s
}

// Load reads, parses and applies the file (Store.Replace), then marks the
// store synced. Its error names the file and every invalid field; at
// start-up it should stop the process.
func (s *Source) Load() error {
	_, err := s.reload(true)
	return err
}

// Run keeps the store in sync with the file until ctx is done. It watches
// the file's directory (so that an atomic rename or a Kubernetes ConfigMap
// symlink swap is seen), waits for events to settle (100 ms), and re-reads
// the file; it also re-reads it at once (an edit made since Load is not
// missed) and every 10 s. Content that did not change is ignored. A file that cannot be read or is invalid is refused with an
// error log and a failure count, and the last good endpoint set stays. If
// Load did not succeed before, Run keeps trying on every change. Run
// returns when ctx is done, after its watcher stopped.
func (s *Source) Run(ctx context.Context) {
	// No Initial: the first check reloads, which is a no-op when the file
	// still holds the content Load applied.
	opts := filewatch.Options{Debounce: s.debounce, Poll: s.poll, Logger: s.log}
	if err := filewatch.Run(ctx, []string{s.path}, opts, s.reloadForWatch); err != nil {
		s.log.Error(err, "Cannot watch the endpoints file")
	}
}

// reloadForWatch reloads and tells the watcher what was read.
func (s *Source) reloadForWatch() ([32]byte, bool) {
	s.reloadLogged(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastReadErr != "" || s.lastData == nil {
		return [32]byte{}, false
	}
	return filewatch.Sum(s.lastData), true
}

func (s *Source) reloadLogged(force bool) {
	applied, err := s.reload(force)
	switch {
	case err != nil:
		s.log.Error(err, "Endpoints file refused; keeping the last good endpoint set")
	case applied:
		s.log.V(1).Info("Endpoints file reloaded", "endpoints", s.store.Snapshot().Len())
	}
}

// reload reads and applies the file. Unless force is set, content equal to
// the last content tried is skipped. It reports whether a new endpoint set
// was applied.
func (s *Source) reload(force bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := readFile(s.path)
	if err != nil {
		if !force && s.lastReadErr == err.Error() {
			return false, nil // the same failure as last time
		}
		s.lastData, s.lastReadErr = nil, err.Error()
		s.reloads.WithLabelValues(ResultFailure).Inc()
		return false, fmt.Errorf("endpoints file %s: %w", s.path, err)
	}
	s.lastReadErr = ""
	if !force && s.lastData != nil && bytes.Equal(data, s.lastData) {
		return false, nil
	}
	s.lastData = data
	specs, err := Parse(data)
	if err == nil {
		err = s.store.Replace(specs)
	}
	if err != nil {
		s.reloads.WithLabelValues(ResultFailure).Inc()
		return false, fmt.Errorf("endpoints file %s: %w", s.path, err)
	}
	s.loaded = true
	s.store.SetSynced(true)
	s.reloads.WithLabelValues(ResultSuccess).Inc()
	s.lastSuccess.SetToCurrentTime()
	return true, nil
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
		return nil, errors.New("the file is larger than 16 MiB")
	}
	return data, nil
}
