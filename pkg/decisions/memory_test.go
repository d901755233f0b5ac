package decisions

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// The shape of the load: a pool of 1000 endpoints, a profile of two
// filters and three scorers, explanations at the default limits.
const (
	loadEndpoints = 1000
	loadFilters   = 2
	loadScorers   = 3
)

// queueScorer scores by queue length, so every endpoint differs.
type queueScorer struct{ name string }

func (s queueScorer) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "queue-scorer", Name: s.name}
}
func (queueScorer) Category() scheduling.ScorerCategory { return scheduling.Distribution }
func (queueScorer) Score(_ context.Context, _ *scheduling.Request, eps []*scheduling.Endpoint, scores []float64) {
	for i, e := range eps {
		scores[i] = 1 / float64(1+e.Metrics().WaitingQueueSize)
	}
}

type firstPicker struct{}

func (firstPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "first-picker", Name: "first"}
}
func (firstPicker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{scored[len(scored)-1].Endpoint}}
}

type loadGen struct {
	p   *scheduling.Profile
	eps []*scheduling.Endpoint
}

func newLoad(tb testing.TB) *loadGen {
	eps := schedulingtest.Endpoints(loadEndpoints, func(i int, b *schedulingtest.EndpointBuilder) { b.Queue(i % 97) })
	all := &schedulingtest.FakeFilter{Name: "all", Keep: func(*scheduling.Endpoint) bool { return true }}
	most := &schedulingtest.FakeFilter{Name: "most", Keep: func(e *scheduling.Endpoint) bool { return e.Metrics().WaitingQueueSize != 3 }}
	var scorers []scheduling.WeightedScorer
	for i := range loadScorers {
		scorers = append(scorers, scheduling.WeightedScorer{Scorer: queueScorer{name: "q" + strconv.Itoa(i)}, Weight: 1})
	}
	p, err := scheduling.NewProfile("default", []scheduling.Filter{all, most}, scorers, firstPicker{}, nil)
	require.NoError(tb, err)
	return &loadGen{p: p, eps: eps}
}

// record builds one decision's Record the way pkg/extproc does, with
// client strings at their caps.
func (g *loadGen) record(tb testing.TB, i int) *Record {
	req := &scheduling.Request{ID: strconv.Itoa(i), TargetModel: "m"}
	x := scheduling.Explain(req, scheduling.ExplainLimits{})
	res, err := g.p.Run(context.Background(), req, g.eps)
	if err != nil {
		tb.Fatal(err)
	}
	id := strconv.Itoa(i) + strings.Repeat("x", MaxIDBytes)
	id, _ = Cut(id, MaxIDBytes)
	model := strings.Repeat("m", MaxModelBytes)
	return &Record{
		Time: time.Now(), RequestID: id, Model: model, TargetModel: model,
		PrimaryProfile: "default", Profiles: x.Runs,
		Endpoint: res.Targets[0].Name(), Targets: []string{res.Targets[0].HostPort()},
	}
}

// recordBound is an upper bound of one Record's heap at the load's shape:
// every struct, slice and string it may hold (strings shared with the
// endpoints and plugins counted as if owned), doubled for allocation size
// classes.
func recordBound() int {
	const (
		str     = int(unsafe.Sizeof(""))
		nameLen = 32 // "endpoint-999", "10.0.0.1:65535"…, generous
		maxEp   = scheduling.DefaultExplainEndpoints
	)
	strs := MaxIDBytes + 2*MaxModelBytes + 2*nameLen + 2*str
	run := int(unsafe.Sizeof(scheduling.ProfileRun{})) +
		loadFilters*(int(unsafe.Sizeof(scheduling.FilterStep{}))+maxEp*(str+nameLen)) +
		loadScorers*(int(unsafe.Sizeof(scheduling.ScorerInfo{}))+nameLen) +
		(maxEp+1)*(int(unsafe.Sizeof(scheduling.EndpointScores{}))+2*nameLen+loadScorers*int(unsafe.Sizeof(scheduling.ScorePair{}))) +
		str + nameLen // one target
	return 2 * (int(unsafe.Sizeof(Record{})) + strs + run)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestRingMemoryBounded fills a ring with decisions over 1000 endpoints,
// then adds five times as many: the heap the ring retains stays under
// size × recordBound, and does not grow with the records added.
func TestRingMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("adds 6000 decisions")
	}
	g := newLoad(t)
	const size = 1000
	base := heapInUse()
	r := New(size)
	for i := range size {
		r.Add(g.record(t, i))
	}
	full := heapInUse()
	for i := range 5 * size {
		r.Add(g.record(t, size+i))
	}
	after := heapInUse()
	bound := uint64(size*recordBound() + size*8) // + the slots
	t.Logf("per record: bound %d B, retained %d B after %d records, %d B after %d", recordBound(),
		(full-base)/size, size, (after-base)/size, 6*size)
	require.Less(t, full-base, bound, "retained heap with the ring full")
	require.Less(t, after-base, bound, "retained heap after 5× more records")
	require.Len(t, r.Snapshot(Filter{}), size)
	runtime.KeepAlive(r)
}

// BenchmarkRingAdd records decisions over 1000 endpoints into a ring of
// DefaultSize: ns and bytes per decision recorded (explanation included),
// and the heap the ring retains at the end (retained-B), which stays at
// about DefaultSize records however large b.N is (run with
// -benchtime=1000000x for a million decisions).
func BenchmarkRingAdd(b *testing.B) {
	g := newLoad(b)
	r := New(DefaultSize)
	base := heapInUse()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Add(g.record(b, i))
		i++
	}
	b.StopTimer()
	b.ReportMetric(float64(heapInUse())-float64(base), "retained-B")
	b.ReportMetric(float64(DefaultSize*recordBound()), "bound-B")
	runtime.KeepAlive(r)
}
