package server

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// fileWatcher reports changes of one file's content. It watches the
// file's directory (editors replace files by rename; Kubernetes swaps a
// ConfigMap's ..data symlink), waits for events to settle for the debounce
// period, and reports only when the content's hash differs from the last
// one seen (initially the content the caller loaded). It also re-reads the
// file every pollInterval, in case an event was missed.
type fileWatcher struct {
	path     string
	w        *fsnotify.Watcher
	changed  chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup
	debounce time.Duration
	sum      [32]byte
}

// pollInterval is the re-read period that backs up file events.
const pollInterval = 10 * time.Second

func newFileWatcher(path string, loaded [32]byte, debounce time.Duration) (*fileWatcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		_ = w.Close()
		return nil, err
	}
	fw := &fileWatcher{path: path, w: w, changed: make(chan struct{}, 1), done: make(chan struct{}), debounce: debounce, sum: loaded}
	fw.wg.Add(1)
	go fw.loop()
	return fw, nil
}

func fileSum(path string) ([32]byte, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return [32]byte{}, false
	}
	return sha256.Sum256(data), true
}

// Changed receives once per settled change of the content.
func (fw *fileWatcher) Changed() <-chan struct{} { return fw.changed }

// Close stops the watcher and waits for its goroutine.
func (fw *fileWatcher) Close() {
	close(fw.done)
	_ = fw.w.Close()
	fw.wg.Wait()
}

func (fw *fileWatcher) loop() {
	defer fw.wg.Done()
	// Check at once: the file may have changed between the caller's read
	// and the start of the watch.
	timer := time.NewTimer(0)
	defer timer.Stop()
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	for {
		select {
		case <-fw.done:
			return
		case <-poll.C:
			timer.Reset(0)
		case _, ok := <-fw.w.Events:
			if !ok {
				return
			}
			// Any event in the directory may be our file (symlink swaps
			// touch other names); the hash decides.
			timer.Reset(fw.debounce)
		case _, ok := <-fw.w.Errors:
			if !ok {
				return
			}
			timer.Reset(fw.debounce)
		case <-timer.C:
			// A file that disappears is reported once (the zero sum), so
			// the reload logs it; then each new content once.
			sum, _ := fileSum(fw.path)
			if bytes.Equal(sum[:], fw.sum[:]) {
				continue
			}
			fw.sum = sum
			fw.notify()
		}
	}
}

func (fw *fileWatcher) notify() {
	select {
	case fw.changed <- struct{}{}:
	default:
	}
}

// buildInfo returns the VCS revision and the module version for
// inference_extension_info.
func buildInfo() (commit, ref string) {
	commit, ref = "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if bi.Main.Version != "" {
		ref = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			commit = s.Value
		}
	}
	return
}
