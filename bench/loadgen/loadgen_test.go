package loadgen

import (
	"context"
	"crypto/tls"
	"math"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/switchyard-ai/switchyard/bench/nullepp"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

// TestScheduleIsPoisson: the gaps of a seeded schedule have mean 1/rate
// and an exponential shape (P(gap < mean) = 1 - 1/e), and the same seed
// gives the same arrivals.
func TestScheduleIsPoisson(t *testing.T) {
	const rate, n = 1000.0, 20000
	s := NewSchedule(rate, 7)
	var prev time.Duration
	below := 0
	var last time.Duration
	for range n {
		at := s.Next()
		require.GreaterOrEqual(t, at, prev)
		if gap := at - prev; gap < time.Second/rate {
			below++
		}
		prev, last = at, at
	}
	mean := last.Seconds() / n
	assert.InDelta(t, 1/rate, mean, 0.03/rate, "mean gap")
	assert.InDelta(t, 1-1/math.E, float64(below)/n, 0.015, "share of gaps below the mean")
	assert.Equal(t, Arrivals(rate, time.Second, 7), Arrivals(rate, time.Second, 7))
	assert.NotEqual(t, Arrivals(rate, time.Second, 7), Arrivals(rate, time.Second, 8))
	a := Arrivals(rate, time.Second, 7)
	assert.InDelta(t, rate, float64(len(a)), 4*math.Sqrt(rate), "arrivals in one second")
	assert.Less(t, a[len(a)-1], time.Second)
}

// TestHistogramMerge: merging per-worker recorders gives the percentiles
// of one recorder that saw every value.
func TestHistogramMerge(t *testing.T) {
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Microsecond * 10
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		all.Record(d)
	}
	a.Merge(b)
	assert.Equal(t, all.Summary(), a.Summary())
	assert.Equal(t, int64(1000), a.Count())
	assert.InDelta(t, 5000, a.Quantile(50).Microseconds(), 10)
	assert.InDelta(t, 9900, a.Quantile(99).Microseconds(), 10)
	assert.InDelta(t, 10_000, a.Max().Microseconds(), 10) // within the 0.1 % resolution
	// Out of range values are clamped, not lost.
	c := NewHistogram()
	c.Record(0)
	c.Record(time.Hour)
	assert.Equal(t, int64(2), c.Count())
	assert.InDelta(t, float64(time.Minute), float64(c.Max()), float64(60*time.Millisecond), "clamped to 60 s")
}

// A histogram with a longer bound keeps latencies past 60 s (a saturated
// routing-quality step) instead of clamping them to 60 s.
func TestHistogramUpTo(t *testing.T) {
	h := NewHistogramUpTo(10 * time.Minute)
	for _, d := range []time.Duration{30 * time.Second, 90 * time.Second, 150 * time.Second, time.Hour} {
		h.Record(d)
	}
	assert.InDelta(t, float64(90*time.Second), float64(h.Quantile(50)), float64(90*time.Millisecond))
	assert.InDelta(t, float64(150*time.Second), float64(h.Quantile(75)), float64(150*time.Millisecond))
	assert.InDelta(t, float64(10*time.Minute), float64(h.Max()), float64(600*time.Millisecond), "clamped to its bound")
	o := NewHistogramUpTo(10 * time.Minute)
	o.Record(2 * time.Minute)
	h.Merge(o)
	assert.Equal(t, int64(5), h.Count())
}

// TestReadProcSelf reads this process: CPU time grows with work, RSS is
// positive and the peak is at least the current resident set.
func TestReadProcSelf(t *testing.T) {
	pid := os.Getpid()
	u, err := ReadProc(pid)
	require.NoError(t, err)
	assert.Positive(t, u.RSS)
	assert.GreaterOrEqual(t, u.PeakRSS, u.RSS)
	deadline := time.Now().Add(10 * time.Second)
	x := 1.0
	for {
		for range 1_000_000 {
			x = math.Sqrt(x + 1)
		}
		v, err := ReadProc(pid)
		require.NoError(t, err)
		if v.CPU > u.CPU {
			break
		}
		require.True(t, time.Now().Before(deadline), "CPU time did not grow")
	}
	_ = x
	require.NoError(t, ResetPeak(pid))
	_, err = ReadProc(-1)
	assert.Error(t, err)
}

// recorder is an EPP that records every message it receives and answers
// as the null EPP does.
type recorder struct {
	extprocv3.UnimplementedExternalProcessorServer
	null *nullepp.Server
	mu   sync.Mutex
	msgs [][]*extprocv3.ProcessingRequest
}

type recStream struct {
	extprocv3.ExternalProcessor_ProcessServer
	got *[]*extprocv3.ProcessingRequest
}

func (s recStream) Recv() (*extprocv3.ProcessingRequest, error) {
	m, err := s.ExternalProcessor_ProcessServer.Recv()
	if err == nil {
		*s.got = append(*s.got, m)
	}
	return m, err
}

func (r *recorder) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	var got []*extprocv3.ProcessingRequest
	err := r.null.Process(recStream{stream, &got})
	r.mu.Lock()
	r.msgs = append(r.msgs, got)
	r.mu.Unlock()
	return err
}

func serve(t *testing.T, srv extprocv3.ExternalProcessorServer, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(g, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

// TestExchangeSequence: the EPP receives Envoy's FULL_DUPLEX_STREAMED
// sequence — request headers (pseudo-headers, content-length,
// x-request-id, protocol_config, not end_of_stream), the body in chunks
// whose last one ends the stream, response headers with :status, the
// response body with end_of_stream — and the exchange reports the
// destination the EPP chose.
func TestExchangeSequence(t *testing.T) {
	rec := &recorder{null: nullepp.New("127.10.0.1:8000")}
	addr := serve(t, rec)
	conns, err := Dial(Config{Target: addr, Conns: 1})
	require.NoError(t, err)
	defer conns[0].Close()
	x := &Exchange{Path: "/v1/chat/completions", Body: ChatBody("m", 100_000, 1), ChunkSize: 32 << 10, ResponseBody: ChatResponse("m"),
		Headers: map[string]string{"x-tenant": "a"}}
	res, err := x.Run(context.Background(), extprocv3.NewExternalProcessorClient(conns[0]), "id-1")
	require.NoError(t, err)
	assert.Equal(t, "127.10.0.1:8000", res.Destination)
	assert.Zero(t, res.Status)
	assert.Positive(t, res.Decision)
	assert.GreaterOrEqual(t, res.Total, res.Decision)

	require.Eventually(t, func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.msgs) == 1 }, 5*time.Second, 10*time.Millisecond)
	msgs := rec.msgs[0]
	require.Len(t, msgs, 1+4+2) // 100 000 bytes in 32 KiB chunks: 4
	h := msgs[0].GetRequestHeaders()
	require.NotNil(t, h)
	assert.False(t, h.GetEndOfStream())
	assert.NotNil(t, msgs[0].GetProtocolConfig())
	hdr := map[string]string{}
	for _, v := range h.GetHeaders().GetHeaders() {
		hdr[v.GetKey()] = string(v.GetRawValue())
	}
	assert.Equal(t, "/v1/chat/completions", hdr[":path"])
	assert.Equal(t, "POST", hdr[":method"])
	assert.Equal(t, "id-1", hdr["x-request-id"])
	assert.Equal(t, "a", hdr["x-tenant"])
	assert.Equal(t, "100000", hdr["content-length"])
	total := 0
	for i, m := range msgs[1:5] {
		b := m.GetRequestBody()
		require.NotNil(t, b, i)
		total += len(b.GetBody())
		assert.Equal(t, i == 3, b.GetEndOfStream(), i)
	}
	assert.Equal(t, 100_000, total)
	assert.Equal(t, 100_000, len(x.Body))
	rh := msgs[5].GetResponseHeaders()
	require.NotNil(t, rh)
	assert.Equal(t, ":status", rh.GetHeaders().GetHeaders()[0].GetKey())
	rb := msgs[6].GetResponseBody()
	require.NotNil(t, rb)
	assert.True(t, rb.GetEndOfStream())
	assert.Contains(t, string(rb.GetBody()), `"usage"`)
}

// TestRunOpenAndClosedLoop: an open-loop run at a fixed rate sends about
// rate × duration exchanges, all routed; a closed-loop run keeps its
// streams busy; both record every routed exchange.
func TestRunOpenAndClosedLoop(t *testing.T) {
	addr := serve(t, nullepp.New("127.10.0.1:8000"))
	xs := ChatExchanges("m", 1024, 4)
	pick := func(i int) *Exchange { return xs[i%len(xs)] }
	rep, err := Run(context.Background(), Config{Target: addr, Rate: 200, Seed: 1, Duration: time.Second, Exchange: pick, PID: os.Getpid()})
	require.NoError(t, err)
	assert.Zero(t, rep.Errors, rep.FirstError)
	assert.Equal(t, int64(len(Arrivals(200, time.Second, 1))), rep.Sent)
	assert.Equal(t, rep.Sent, rep.Routed)
	assert.Equal(t, rep.Routed, rep.Decision.Count)
	assert.Positive(t, rep.PeakRSS)
	assert.GreaterOrEqual(t, rep.CPUPer1000(), 0.0)

	rep, err = Run(context.Background(), Config{Target: addr, Concurrency: 4, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Exchange: pick})
	require.NoError(t, err)
	assert.Zero(t, rep.Errors, rep.FirstError)
	assert.Positive(t, rep.Routed)
	assert.Equal(t, rep.Routed, rep.Total.Count)
	assert.Positive(t, rep.Throughput)

	_, err = Run(context.Background(), Config{Target: addr, Exchange: pick})
	assert.Error(t, err, "neither rate nor concurrency")
}

// TestRunTLS: with TLS the generator verifies the EPP against the CA it
// is given, or skips verification without one (as GIE's gateway does).
func TestRunTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "bench")
	leaf := ca.Issue(t, "")
	addr := serve(t, nullepp.New("127.10.0.1:8000"),
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{leaf.TLS}, MinVersion: tls.VersionTLS12})))
	xs := ChatExchanges("m", 512, 1)
	pick := func(int) *Exchange { return xs[0] }
	for _, caFile := range []string{ca.WriteFile(t, t.TempDir()), ""} {
		rep, err := Run(context.Background(), Config{Target: addr, TLS: true, CAFile: caFile, Concurrency: 2, Duration: 100 * time.Millisecond, Exchange: pick})
		require.NoError(t, err)
		assert.Zero(t, rep.Errors, rep.FirstError)
		assert.Positive(t, rep.Routed)
	}
	// Without TLS against a TLS server every exchange fails, and says so.
	rep, err := Run(context.Background(), Config{Target: addr, Concurrency: 1, Duration: 50 * time.Millisecond, Timeout: time.Second, Exchange: pick})
	require.NoError(t, err)
	assert.Positive(t, rep.Errors)
	assert.NotEmpty(t, rep.FirstError)
}
