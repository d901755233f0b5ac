package filewatch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// Defaults of Options.
const (
	// DefaultDebounce lets a burst of events (an editor's write, rename
	// and chmod, or a symlink swap) settle into one check.
	DefaultDebounce = 100 * time.Millisecond
	// DefaultPoll is how often the files are hashed without an event.
	DefaultPoll = 10 * time.Second
)

// Options configures Run.
type Options struct {
	// Debounce is how long events must be quiet before the files are
	// hashed; zero or less means DefaultDebounce.
	Debounce time.Duration
	// Poll is how often the files are hashed without an event; zero or
	// less means DefaultPoll.
	Poll time.Duration
	// Initial is the hash (see Sum) of the content the caller has loaded.
	// Run checks the files at once and reports only if they differ from
	// it, so an edit made before the watch started is not missed. Nil
	// means unknown: the first check always reports.
	Initial *[sha256.Size]byte
	// Logger logs watch failures as errors and events at V(4). The zero
	// Logger discards.
	Logger logr.Logger
}

// Run follows the files at paths until ctx is done, and calls onChange,
// on Run's goroutine, each time their content settles on a new hash (see
// the package documentation). A directory that cannot be watched is logged
// and left to the poll. Run returns nil when ctx is done, after its
// fsnotify watcher stopped; it returns an error at once only for bad
// arguments.
func Run(ctx context.Context, paths []string, opts Options, onChange func()) error {
	if len(paths) == 0 {
		return errors.New("filewatch: no paths to watch")
	}
	for i, p := range paths {
		if p == "" {
			return fmt.Errorf("filewatch: paths[%d] is empty", i)
		}
	}
	if onChange == nil {
		return errors.New("filewatch: onChange is nil")
	}
	debounce, poll := opts.Debounce, opts.Poll
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	if poll <= 0 {
		poll = DefaultPoll
	}
	log := opts.Logger

	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	if w, err := watchDirs(paths, log, poll); err == nil {
		defer func() { _ = w.Close() }()
		events, watchErrs = w.Events, w.Errors
	}

	last, known := [sha256.Size]byte{}, opts.Initial != nil
	if known {
		last = *opts.Initial
	}
	// A check is pending from the first event of a burst until the burst
	// settles; the poll does not cut a burst short unless it has lasted a
	// whole poll period (a directory that is never quiet).
	check := time.NewTimer(0) // at once: the files may have changed already
	defer check.Stop()
	pending, pendingSince := true, time.Now()
	schedule := func(d time.Duration) {
		if !pending {
			pending, pendingSince = true, time.Now()
		}
		check.Reset(d)
	}
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			// Any name may matter (a symlink swap renames "..data", not
			// the file); the hash decides.
			log.V(4).Info("File event", "event", ev.String())
			schedule(debounce)
		case err, ok := <-watchErrs:
			if !ok {
				watchErrs = nil
				continue
			}
			// Events may have been lost (queue overflow): check.
			log.Error(err, "Watching files; checking them")
			schedule(debounce)
		case <-ticker.C:
			if !pending || time.Since(pendingSince) >= poll {
				schedule(0)
			}
		case <-check.C:
			pending = false
			sum := hashFiles(paths)
			if known && sum == last {
				continue
			}
			last, known = sum, true
			if ctx.Err() != nil {
				return nil
			}
			onChange()
		}
	}
}

// watchDirs watches the distinct parent directories of paths. It fails
// only if no directory could be watched.
func watchDirs(paths []string, log logr.Logger, poll time.Duration) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Error(err, "Cannot watch files; polling them", "interval", poll)
		return nil, err
	}
	added := 0
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		dir := filepath.Dir(p)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if err = w.Add(dir); err != nil {
			log.Error(err, "Cannot watch a directory; polling it", "dir", dir, "interval", poll)
			continue
		}
		added++
	}
	if added == 0 {
		_ = w.Close()
		return nil, err
	}
	return w, nil
}

// Sum returns the hash Run computes for files with these contents, in the
// order of its paths. Use it for Options.Initial with the bytes the caller
// has loaded.
func Sum(contents ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range contents {
		d := sha256.Sum256(c)
		writeRecord(h, 1, d)
	}
	return sum(h)
}

// hashFiles hashes the content of every path; a file that cannot be read
// contributes its error instead.
func hashFiles(paths []string) [sha256.Size]byte {
	h := sha256.New()
	buf := make([]byte, 32<<10)
	for _, p := range paths {
		d, err := hashFile(p, buf)
		if err != nil {
			writeRecord(h, 0, sha256.Sum256([]byte(err.Error())))
			continue
		}
		writeRecord(h, 1, d)
	}
	return sum(h)
}

func hashFile(path string, buf []byte) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return d, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	// Hide the file's WriteTo, which would ignore buf.
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf); err != nil {
		return d, err
	}
	return sum(h), nil
}

// writeRecord appends one file's record: a kind byte (1 content, 0 error)
// and a digest, so that records of different files cannot run together.
func writeRecord(h hash.Hash, kind byte, d [sha256.Size]byte) {
	h.Write([]byte{kind})
	h.Write(d[:])
}

func sum(h hash.Hash) [sha256.Size]byte {
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}
