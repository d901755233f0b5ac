package filewatch

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// watch runs Run on paths until the test ends and counts the reports.
func watch(t *testing.T, paths []string, opts Options) *atomic.Int32 {
	t.Helper()
	if opts.Debounce == 0 {
		// Long enough that a burst of writes on a loaded CI machine still
		// falls within one debounce window.
		opts.Debounce = 150 * time.Millisecond
	}
	if opts.Poll == 0 {
		opts.Poll = time.Hour // only events, unless the case says otherwise
	}
	opts.Logger = testr.NewWithOptions(t, testr.Options{Verbosity: 4})
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, paths, opts, func() ([32]byte, bool) {
			n.Add(1)
			return load(paths)
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return &n
}

// load reads the files as a consumer does and returns the Sum of what it
// read.
func load(paths []string) ([32]byte, bool) {
	var contents [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return [32]byte{}, false
		}
		contents = append(contents, b)
	}
	return Sum(contents...), true
}

// A consumer that read something other than what the files hold (it
// caught a file half-written) is called again at the next check, even
// though the files do not change any more.
func TestConsumerThatReadAStaleFileIsCalledAgain(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "B")
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{p}, Options{Poll: 50 * time.Millisecond, Logger: testr.New(t)}, func() ([32]byte, bool) {
			if calls.Add(1) == 1 {
				return Sum([]byte("")), true // the truncated file
			}
			return load([]string{p})
		})
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	require.Eventually(t, func() bool { return calls.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, int32(2), calls.Load(), "settled once the consumer read the content")
}

// A watched directory that is deleted and recreated is watched again at
// the next poll, and edits after the recreation are reported.
func TestRecreatedDirectoryIsWatchedAgain(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conf")
	require.NoError(t, os.Mkdir(dir, 0o755))
	p := filepath.Join(dir, "f")
	write(t, p, "a")
	n := watch(t, []string{p}, Options{Poll: 100 * time.Millisecond})
	require.Eventually(t, func() bool { return n.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, os.RemoveAll(dir))
	require.Eventually(t, func() bool { return n.Load() == 2 }, 5*time.Second, 5*time.Millisecond, "the deletion is reported")
	require.NoError(t, os.Mkdir(dir, 0o755))
	time.Sleep(400 * time.Millisecond) // a few polls: the directory is watched again
	writeAtomic(t, p, "b")
	require.Eventually(t, func() bool { return n.Load() == 3 }, 5*time.Second, 5*time.Millisecond)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	write(t, path+".tmp", content)
	require.NoError(t, os.Rename(path+".tmp", path))
}

// swapData makes dir/name a new version directory holding file=content
// and points dir/..data at it with an atomic rename, as the kubelet does.
func swapData(t *testing.T, dir, name, file, content string) {
	t.Helper()
	require.NoError(t, os.Mkdir(filepath.Join(dir, name), 0o755))
	write(t, filepath.Join(dir, name, file), content)
	require.NoError(t, os.Symlink(name, filepath.Join(dir, "..data_tmp")))
	require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
}

// settle is how long a case waits for late reports after the expected
// ones arrived.
const settle = 400 * time.Millisecond

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		// setup writes the files and returns the paths to watch.
		setup func(t *testing.T, dir string) []string
		// opts adjusts the options (Initial, Poll) before Run starts.
		opts func(o *Options)
		// initial is the number of reports expected before change.
		initial int32
		// change edits the files while Run runs; nil: no edit.
		change func(t *testing.T, dir string)
		want   int32
	}{
		{
			name:    "nil initial reports once at start",
			setup:   oneFile("a"),
			initial: 1, want: 1,
		},
		{
			name:  "matching initial does not report",
			setup: oneFile("a"),
			opts:  initial("a"),
			want:  0,
		},
		{
			name:    "edit before the watch starts is reported",
			setup:   oneFile("b"),
			opts:    initial("a"),
			initial: 1, want: 1,
		},
		{
			name:   "edit in place",
			setup:  oneFile("a"),
			opts:   initial("a"),
			change: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "f"), "b") },
			want:   1,
		},
		{
			name:   "atomic rename",
			setup:  oneFile("a"),
			opts:   initial("a"),
			change: func(t *testing.T, dir string) { writeAtomic(t, filepath.Join(dir, "f"), "b") },
			want:   1,
		},
		{
			name:   "same bytes are not a change",
			setup:  oneFile("a"),
			opts:   initial("a"),
			change: func(t *testing.T, dir string) { writeAtomic(t, filepath.Join(dir, "f"), "a") },
			want:   0,
		},
		{
			name:  "burst is debounced into one report",
			setup: oneFile("a"),
			opts:  initial("a"),
			change: func(t *testing.T, dir string) {
				for i := range 20 {
					write(t, filepath.Join(dir, "f"), strings.Repeat("x", i+1))
				}
			},
			want: 1,
		},
		{
			name: "configmap symlink swap",
			setup: func(t *testing.T, dir string) []string {
				swapData(t, dir, "..v1", "f", "a")
				require.NoError(t, os.Symlink(filepath.Join("..data", "f"), filepath.Join(dir, "f")))
				return []string{filepath.Join(dir, "f")}
			},
			opts: initial("a"),
			change: func(t *testing.T, dir string) {
				swapData(t, dir, "..v2", "f", "b")
				require.NoError(t, os.RemoveAll(filepath.Join(dir, "..v1")))
			},
			want: 1,
		},
		{
			name:  "removal is reported once, even across polls",
			setup: oneFile("a"),
			opts:  func(o *Options) { initial("a")(o); o.Poll = 20 * time.Millisecond },
			change: func(t *testing.T, dir string) {
				require.NoError(t, os.Remove(filepath.Join(dir, "f")))
			},
			want: 1,
		},
		{
			name:  "removal then return",
			setup: oneFile("a"),
			opts:  initial("a"),
			change: func(t *testing.T, dir string) {
				require.NoError(t, os.Remove(filepath.Join(dir, "f")))
				time.Sleep(settle)
				write(t, filepath.Join(dir, "f"), "a")
			},
			want: 2,
		},
		{
			name:   "absent file appears",
			setup:  func(t *testing.T, dir string) []string { return []string{filepath.Join(dir, "f")} },
			change: func(t *testing.T, dir string) { writeAtomic(t, filepath.Join(dir, "f"), "a") },
			// nil Initial: the absent file is the first report.
			initial: 1, want: 2,
		},
		{
			name: "second of two files",
			setup: func(t *testing.T, dir string) []string {
				write(t, filepath.Join(dir, "c"), "cert")
				write(t, filepath.Join(dir, "k"), "key")
				return []string{filepath.Join(dir, "c"), filepath.Join(dir, "k")}
			},
			opts: func(o *Options) {
				s := Sum([]byte("cert"), []byte("key"))
				o.Initial = &s
			},
			change: func(t *testing.T, dir string) { writeAtomic(t, filepath.Join(dir, "k"), "key2") },
			want:   1,
		},
		{
			name: "poll sees a change without events",
			setup: func(t *testing.T, dir string) []string {
				target := filepath.Join(dir, "elsewhere", "real")
				require.NoError(t, os.Mkdir(filepath.Dir(target), 0o755))
				write(t, target, "a")
				require.NoError(t, os.Symlink(target, filepath.Join(dir, "f")))
				return []string{filepath.Join(dir, "f")}
			},
			opts: func(o *Options) { initial("a")(o); o.Poll = 20 * time.Millisecond },
			// Atomic: a poll may otherwise see the truncated file in between.
			change: func(t *testing.T, dir string) { writeAtomic(t, filepath.Join(dir, "elsewhere", "real"), "b") },
			want:   1,
		},
		{
			name: "directory that cannot be watched is polled",
			setup: func(t *testing.T, dir string) []string {
				return []string{filepath.Join(dir, "later", "f")}
			},
			opts: func(o *Options) { o.Poll = 20 * time.Millisecond },
			change: func(t *testing.T, dir string) {
				require.NoError(t, os.Mkdir(filepath.Join(dir, "later"), 0o755))
				writeAtomic(t, filepath.Join(dir, "later", "f"), "a")
			},
			initial: 1, want: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			paths := tt.setup(t, dir)
			var opts Options
			if tt.opts != nil {
				tt.opts(&opts)
			}
			n := watch(t, paths, opts)
			require.Eventually(t, func() bool { return n.Load() == tt.initial }, 5*time.Second, 5*time.Millisecond)
			time.Sleep(200 * time.Millisecond) // the watch is up
			if tt.change != nil {
				tt.change(t, dir)
			}
			require.Eventually(t, func() bool { return n.Load() >= tt.want }, 5*time.Second, 5*time.Millisecond)
			time.Sleep(settle)
			assert.Equal(t, tt.want, n.Load())
		})
	}
}

func oneFile(content string) func(t *testing.T, dir string) []string {
	return func(t *testing.T, dir string) []string {
		p := filepath.Join(dir, "f")
		write(t, p, content)
		return []string{p}
	}
}

func initial(content string) func(o *Options) {
	return func(o *Options) {
		s := Sum([]byte(content))
		o.Initial = &s
	}
}

func TestRunArguments(t *testing.T) {
	nop := func() ([32]byte, bool) { return [32]byte{}, false }
	tests := []struct {
		name     string
		paths    []string
		onChange OnChange
		want     string
	}{
		{"no paths", nil, nop, "filewatch: no paths to watch"},
		{"empty path", []string{"x", ""}, nop, "filewatch: paths[1] is empty"},
		{"nil callback", []string{"x"}, nil, "filewatch: onChange is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Run(context.Background(), tt.paths, Options{}, tt.onChange)
			assert.EqualError(t, err, tt.want)
		})
	}
}

// TestRunStops: Run returns once its context is done, even with a callback
// that is slow.
func TestRunStops(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{p}, Options{}, func() ([32]byte, bool) {
			time.Sleep(20 * time.Millisecond)
			return load([]string{p})
		})
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestSumMatchesFiles: Sum of the bytes equals the hash Run computes for
// the files, and differs when a file is missing or the order changes.
func TestSumMatchesFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write(t, a, "one")
	write(t, b, "two")
	tests := []struct {
		name  string
		paths []string
		sum   [sha256.Size]byte
		equal bool
	}{
		{"one file", []string{a}, Sum([]byte("one")), true},
		{"two files", []string{a, b}, Sum([]byte("one"), []byte("two")), true},
		{"order matters", []string{b, a}, Sum([]byte("one"), []byte("two")), false},
		{"no run-together", []string{a, b}, Sum([]byte("onet"), []byte("wo")), false},
		{"missing is not empty", []string{filepath.Join(dir, "none")}, Sum(nil), false},
		{"empty file", []string{writeEmpty(t, dir)}, Sum(nil), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.equal, hashFiles(tt.paths) == tt.sum)
		})
	}
}

func writeEmpty(t *testing.T, dir string) string {
	p := filepath.Join(dir, "empty")
	write(t, p, "")
	return p
}

func BenchmarkHashFiles(b *testing.B) {
	dir := b.TempDir()
	paths := []string{filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")}
	for _, p := range paths {
		require.NoError(b, os.WriteFile(p, []byte(strings.Repeat("x", 4096)), 0o600))
	}
	b.ReportAllocs()
	for b.Loop() {
		hashFiles(paths)
	}
}
