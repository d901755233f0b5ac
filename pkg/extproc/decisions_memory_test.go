package extproc

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/decisions"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestRecordRetainsNoClientString feeds the stream's record builder a
// 1 MiB model name and a 1 MiB request id (and the 1 MiB target model of
// every profile run) for a full ring of records: what the ring retains
// stays under its bound of capped strings, instead of a few MiB per
// record, and every cut is counted.
func TestRecordRetainsNoClientString(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 64 records of 3 MiB of strings each")
	}
	const size = 64
	s := &Server{now: time.Now, opts: Options{Decisions: DecisionOptions{Ring: decisions.New(size)}}}
	base := heapAlloc()
	for i := range size {
		// Fresh strings per record, so nothing is shared between records.
		id := strconv.Itoa(i) + strings.Repeat("i", 1<<20)
		model := strconv.Itoa(i) + strings.Repeat("m", 1<<20)
		st := &stream{s: s, reqID: id}
		st.parsed.Model = model
		st.req = &scheduling.Request{ID: id, TargetModel: model}
		st.dec.x = &scheduling.Explanation{Runs: []scheduling.ProfileRun{{Profile: "default", TargetModel: model}}}
		st.recordRefusal(&refusal{status: 503, reason: "no_endpoints", message: strings.Repeat("x", 1<<20)})
	}
	retained := heapAlloc() - base
	recs := s.opts.Decisions.Ring.Snapshot(decisions.Filter{})
	if len(recs) != size {
		t.Fatalf("%d records, want %d", len(recs), size)
	}
	for _, r := range recs {
		if len(r.RequestID) > decisions.MaxIDBytes || len(r.Model) > decisions.MaxModelBytes ||
			len(r.TargetModel) > decisions.MaxModelBytes || len(r.Profiles[0].TargetModel) > decisions.MaxModelBytes ||
			len(r.Refusal.Message) > decisions.MaxTextBytes {
			t.Fatalf("a string past its cap: %d %d %d %d %d", len(r.RequestID), len(r.Model), len(r.TargetModel),
				len(r.Profiles[0].TargetModel), len(r.Refusal.Message))
		}
		// id, model, target model, the run's target model, the message.
		if r.Truncated != 5 {
			t.Fatalf("Truncated = %d, want 5", r.Truncated)
		}
	}
	// Per record: the Record, one ProfileRun and the capped strings,
	// generously doubled; a retained client string alone is 1 MiB.
	const perRecord = 2 * (1024 + decisions.MaxIDBytes + 3*decisions.MaxModelBytes + decisions.MaxTextBytes)
	t.Logf("retained %d B per record (bound %d B)", retained/size, perRecord)
	if retained > size*perRecord {
		t.Fatalf("the ring retains %d B for %d records, more than %d B: client strings are kept alive", retained, size, size*perRecord)
	}
	runtime.KeepAlive(s)
}
