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
	// MaxHashBytes is how much of a file is hashed; consumers refuse
	// larger files anyway. Sum of content longer than this differs from
	// what Run computes, which only costs one extra call.
	MaxHashBytes = 64 << 20
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

// OnChange is called when the files' content changed. It re-reads the
// files and returns the Sum of the content it actually read (ok true), or
// ok false when it could not read them. Run compares the files with that
// sum from then on, so a consumer that caught a file half-written is
// called again until what it read is what the files hold.
type OnChange func() (loaded [sha256.Size]byte, ok bool)

// Run follows the files at paths until ctx is done, and calls onChange,
// on Run's goroutine, each time their content differs from what the
// consumer last loaded (see the package documentation). A directory that
// cannot be watched is logged and left to the poll, and a directory whose
// watch was lost (deleted and recreated) is watched again at the next
// poll. Run returns nil when ctx is done, after its fsnotify watcher
// stopped; it returns an error at once only for bad arguments.
func Run(ctx context.Context, paths []string, opts Options, onChange OnChange) error {
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
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Error(err, "Cannot watch files; polling them", "interval", poll)
	} else {
		defer func() { _ = w.Close() }()
		events, watchErrs = w.Events, w.Errors
	}
	dirs := parentDirs(paths)
	unwatched := map[string]bool{} // directories logged as not watchable
	rewatch := func() {
		if w == nil {
			return
		}
		watched := map[string]bool{}
		for _, d := range w.WatchList() {
			watched[d] = true
		}
		for _, d := range dirs {
			if watched[d] {
				continue
			}
			if err := w.Add(d); err != nil {
				if !unwatched[d] {
					unwatched[d] = true
					log.Error(err, "Cannot watch a directory; polling it", "dir", d, "interval", poll)
				}
				continue
			}
			if unwatched[d] {
				delete(unwatched, d)
				log.Info("Watching a directory again", "dir", d)
			}
		}
	}
	rewatch()

	last, known := [sha256.Size]byte{}, opts.Initial != nil
	if known {
		last = *opts.Initial
	}
	// A check is pending from the first event of a burst until the burst
	// settles; the poll does not cut a burst short unless no check ran for
	// a whole poll period (a directory that is never quiet).
	check := time.NewTimer(0) // at once: the files may have changed already
	defer check.Stop()
	pending, lastCheck := true, time.Now()
	schedule := func(d time.Duration) {
		pending = true
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
			rewatch()
			if !pending || time.Since(lastCheck) >= poll {
				schedule(0)
			}
		case <-check.C:
			pending, lastCheck = false, time.Now()
			sum := hashFiles(paths)
			if known && sum == last {
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			if loaded, ok := onChange(); ok {
				last = loaded
			} else {
				last = sum // unreadable: wait for the files to change again
			}
			known = true
		}
	}
}

// parentDirs returns the distinct parent directories of paths, in order.
func parentDirs(paths []string) []string {
	var dirs []string
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		if d := filepath.Dir(p); !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
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
	// Hide the file's WriteTo, which would ignore buf. A runaway file is
	// hashed up to MaxHashBytes plus its size, not read whole each poll.
	n, err := io.CopyBuffer(h, struct{ io.Reader }{io.LimitReader(f, MaxHashBytes)}, buf)
	if err != nil {
		return d, err
	}
	if n == MaxHashBytes {
		if fi, err := f.Stat(); err == nil {
			fmt.Fprintf(h, "\x00size=%d", fi.Size())
		}
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
