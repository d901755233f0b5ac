package decisions

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func rec(id, model string, targets ...string) *Record {
	r := &Record{RequestID: id, Model: model, TargetModel: model, Targets: targets}
	if len(targets) > 0 {
		r.Endpoint = "name-" + targets[0]
	}
	return r
}

func ids(rs []*Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.RequestID
	}
	return out
}

func TestRingWrapAround(t *testing.T) {
	r := New(3)
	require.Empty(t, r.Snapshot(Filter{}))
	for i := range 5 {
		r.Add(rec("r"+strconv.Itoa(i), "m"))
	}
	require.Equal(t, []string{"r4", "r3", "r2"}, ids(r.Snapshot(Filter{})))
	require.Equal(t, uint64(5), r.Added())
	require.Equal(t, 3, r.Size())
	require.Equal(t, []string{"r4"}, ids(r.Snapshot(Filter{Limit: 1})))

	var off *Ring = New(0)
	off.Add(rec("x", "m")) // no panic: recording off
	require.Nil(t, off.Snapshot(Filter{}))
	require.Zero(t, off.Size())
}

func TestRingFilters(t *testing.T) {
	r := New(10)
	r.Add(rec("a", "llama", "10.0.0.1:8000"))
	r.Add(rec("b", "qwen", "10.0.0.2:8000", "10.0.0.1:8000"))
	fb := rec("c", "llama", "10.0.0.3:8000")
	fb.TargetModel, fb.FallbackModel = "llama-small", "llama-small"
	r.Add(fb)
	ref := &Record{RequestID: "d", Model: "qwen", Refusal: &Refusal{Status: 429, Reason: "queue_full"}}
	r.Add(ref)
	run := &Record{RequestID: "e", Model: "x", Profiles: []scheduling.ProfileRun{{Profile: "p", Targets: []string{"sim-9"}}}}
	r.Add(run)
	r.Add(&Record{RequestID: "f", Model: "x", Site: &Site{Site: "west", Gateway: "127.0.0.9:8443"}})
	for _, tt := range []struct {
		name string
		f    Filter
		want []string
	}{
		{"all", Filter{}, []string{"f", "e", "d", "c", "b", "a"}},
		{"remote site's gateway", Filter{Endpoint: "127.0.0.9:8443"}, []string{"f"}},
		{"request id", Filter{RequestID: "b"}, []string{"b"}},
		{"unknown id", Filter{RequestID: "zz"}, []string{}},
		{"model", Filter{Model: "qwen"}, []string{"d", "b"}},
		{"fallback model", Filter{Model: "llama-small"}, []string{"c"}},
		{"endpoint address, any target", Filter{Endpoint: "10.0.0.1:8000"}, []string{"b", "a"}},
		{"endpoint name", Filter{Endpoint: "name-10.0.0.3:8000"}, []string{"c"}},
		{"a profile run's target", Filter{Endpoint: "sim-9"}, []string{"e"}},
		{"model and endpoint", Filter{Model: "llama", Endpoint: "10.0.0.1:8000"}, []string{"a"}},
		{"limit", Filter{Model: "llama", Limit: 1}, []string{"c"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ids(r.Snapshot(tt.f)))
		})
	}
}

// TestRingConcurrent adds from many goroutines while others read; run
// with -race. Every record read is complete, and the ring ends with the
// newest records of the sequence.
func TestRingConcurrent(t *testing.T) {
	r := New(64)
	const writers, per = 8, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, rec := range r.Snapshot(Filter{Model: "m"}) {
					if rec.RequestID == "" || rec.Targets[0] == "" {
						t.Errorf("Incomplete record %+v", rec)
						return
					}
				}
			}
		}()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				r.Add(rec(fmt.Sprintf("w%d-%d", w, i), "m", "10.0.0.1:1"))
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	got := r.Snapshot(Filter{})
	require.Len(t, got, 64)
	require.Equal(t, uint64(writers*per), r.Added())
	for i, rec := range got {
		require.Equal(t, uint64(writers*per-1-i), rec.Seq, "record %d", i)
	}
}

func TestCut(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
		cut  bool
	}{
		{"abc", 3, "abc", false},
		{"abcd", 3, "abc", true},
		{"aé", 2, "a", true}, // never half a rune
		{"", 0, "", false},
	} {
		got, cut := Cut(tt.in, tt.n)
		require.Equal(t, tt.want, got, tt.in)
		require.Equal(t, tt.cut, cut, tt.in)
	}
}

// TestCutCopies: a cut string shares no bytes with its source, so a record
// never keeps a client's long string alive.
func TestCutCopies(t *testing.T) {
	big := strings.Repeat("m", 1<<20)
	for _, n := range []int{8, 1 << 21} {
		got, _ := Cut(big, n)
		require.NotEqual(t, uintptr(unsafe.Pointer(unsafe.StringData(big))), uintptr(unsafe.Pointer(unsafe.StringData(got))), "Cut(%d) shares the source", n)
	}
}

// TestRingStaleWriter: a writer preempted between taking its Seq and
// storing does not overwrite the newer record of its slot.
func TestRingStaleWriter(t *testing.T) {
	r := New(2)
	for i := range 3 {
		r.Add(rec("r"+strconv.Itoa(i), "m"))
	}
	stale := rec("late", "m")
	stale.Seq = 0 // took Seq 0 before r2 (Seq 2) was stored in slot 0
	r.store(stale)
	require.Equal(t, []string{"r2", "r1"}, ids(r.Snapshot(Filter{})))
}
