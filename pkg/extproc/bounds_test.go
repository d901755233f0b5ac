package extproc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/metrics"
)

// promMetrics gives the server real request metrics on a private registry.
type promMetrics struct{ reg *prometheus.Registry }

func withMetrics(t testing.TB) (*promMetrics, func(*extproc.Options)) {
	t.Helper()
	pm := &promMetrics{reg: prometheus.NewRegistry()}
	m, err := metrics.New(pm.reg, "pool")
	require.NoError(t, err)
	return pm, func(o *extproc.Options) { o.Metrics = m }
}

// gauge reads a gauge without labels; -1 when it is absent.
func (pm *promMetrics) gauge(t testing.TB, name string) float64 {
	t.Helper()
	fams, err := pm.reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// refusals reads switchyard_request_refusals_total{reason}.
func (pm *promMetrics) refusals(t testing.TB, reason string) float64 {
	t.Helper()
	fams, err := pm.reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != metrics.NameRefusals {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func (pm *promMetrics) buffered(t testing.TB) float64 {
	return pm.gauge(t, metrics.NameExtprocBufferedBytes)
}

// sampler reads the buffered-bytes gauge every millisecond until stopped
// and keeps the largest value seen.
type sampler struct {
	max  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sample(t testing.TB, pm *promMetrics) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				fams, err := pm.reg.Gather()
				if err != nil {
					continue
				}
				for _, f := range fams {
					if f.GetName() == metrics.NameExtprocBufferedBytes {
						if v := int64(f.GetMetric()[0].GetGauge().GetValue()); v > s.max.Load() {
							s.max.Store(v)
						}
					}
				}
			}
		}
	}()
	t.Cleanup(s.finish)
	return s
}

func (s *sampler) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// The options are validated: negative bounds and a budget below the
// per-request limit are errors; zero means the default.
func TestOptionsValidation(t *testing.T) {
	base := func() extproc.Options {
		return extproc.Options{
			Runtime:   func() *extproc.Runtime { return nil },
			Endpoints: func() extproc.EndpointView { return nil },
		}
	}
	tests := []struct {
		name    string
		tweak   func(*extproc.Options)
		wantErr string
	}{
		{name: "defaults", tweak: func(*extproc.Options) {}},
		{name: "negative budget", tweak: func(o *extproc.Options) { o.MaxBufferedBytes = -1 },
			wantErr: "extproc: MaxBufferedBytes must not be negative, got -1"},
		{name: "budget below the body limit", tweak: func(o *extproc.Options) { o.MaxBufferedBytes = 1 << 20 },
			wantErr: "extproc: MaxBufferedBytes (1048576) must be at least 4/3 of MaxRequestBodyBytes (67108864): a large body may use three quarters of the budget"},
		{name: "large tier below the body limit", tweak: func(o *extproc.Options) { o.MaxBufferedBytes, o.MaxRequestBodyBytes = 1<<20, 1<<20 },
			wantErr: "extproc: MaxBufferedBytes (1048576) must be at least 4/3 of MaxRequestBodyBytes (1048576): a large body may use three quarters of the budget"},
		{name: "large tier equal to the body limit", tweak: func(o *extproc.Options) { o.MaxBufferedBytes, o.MaxRequestBodyBytes = 4<<20, 3<<20 }},
		{name: "negative timeout", tweak: func(o *extproc.Options) { o.RequestBodyTimeout = -time.Second },
			wantErr: "extproc: RequestBodyTimeout must not be negative, got -1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.tweak(&o)
			_, err := extproc.New(o)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.wantErr)
		})
	}
	// The defaults show in the limit gauge.
	pm, withM := withMetrics(t)
	o := base()
	withM(&o)
	_, err := extproc.New(o)
	require.NoError(t, err)
	require.Equal(t, float64(extproc.DefaultMaxBufferedBytes), pm.gauge(t, metrics.NameExtprocBufferedBytesLimit))
	require.Equal(t, 0.0, pm.buffered(t))
	require.Equal(t, int64(256<<20), int64(extproc.DefaultMaxBufferedBytes))
	require.Equal(t, 60*time.Second, extproc.DefaultRequestBodyTimeout)
}

// openStream opens a stream that the test ends with the returned cancel.
func openStream(t testing.TB, h *harness) (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := h.client.Process(ctx)
	require.NoError(t, err)
	return s, cancel
}

// Many half-open streams (headers and 1 MiB of body, no end_of_stream)
// against an 8 MiB budget: six are held (large holders get three
// quarters), the rest are refused with 503 buffer_budget_exhausted, the
// accounting never exceeds the budget, normal requests are served
// meanwhile (a one-chunk body needs no budget, and a chunked small one
// takes from the reserve), a large chunked one is refused, and closing the
// held streams brings the accounting back to 0.
func TestBufferBudgetHalfOpenStreams(t *testing.T) {
	const (
		budget    = 8 << 20
		perStream = 1 << 20
		streams   = 64
	)
	pm, withM := withMetrics(t)
	h := start(t, queueConfig, threePods(), withM, func(o *extproc.Options) {
		o.MaxBufferedBytes = budget
		o.MaxRequestBodyBytes = 2 << 20
	})
	require.Equal(t, float64(budget), pm.gauge(t, metrics.NameExtprocBufferedBytesLimit))
	s := sample(t, pm)

	chunk := `{"model":"m","prompt":"` + strings.Repeat("x", perStream-len(`{"model":"m","prompt":"`))
	require.Len(t, chunk, perStream)
	type outcome struct {
		resp *extprocv3.ProcessingResponse
		err  error
	}
	results := make(chan outcome, streams)
	cancels := make([]context.CancelFunc, streams)
	for i := range streams {
		st, cancel := openStream(t, h)
		cancels[i] = cancel
		require.NoError(t, st.Send(reqHeaders("/v1/completions", "x-request-id", "half-open-"+strconv.Itoa(i))))
		if err := st.Send(body(chunk, false)); err != nil && !errors.Is(err, io.EOF) {
			require.NoError(t, err)
		}
		go func() {
			r, err := st.Recv()
			results <- outcome{r, err}
		}()
	}
	refused := immediate(503, "buffer_budget_exhausted", "ServiceUnavailable",
		"the endpoint picker holds as many buffered request bytes as it may; retry later")
	const held = budget * 3 / 4 / perStream
	for range streams - held {
		select {
		case o := <-results:
			require.NoError(t, o.err)
			if diff := cmp.Diff(refused, o.resp, protocmp.Transform()); diff != "" {
				t.Fatalf("refusal (-want +got):\n%s", diff)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the streams beyond the budget were not refused")
		}
	}
	require.Eventually(t, func() bool { return pm.buffered(t) == held*perStream }, 5*time.Second, time.Millisecond, "six streams hold the large tier")
	require.Equal(t, float64(streams-held), pm.refusals(t, extproc.ReasonBufferExhausted))

	// A normal request is served meanwhile: its one chunk ends its body
	// and needs no budget.
	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion, true)}, 2)
	require.Equal(t, routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))).String(), got[0].String())
	// A small request in two chunks takes from the reserve and is served.
	got = h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion[:10], false), body(completion[10:], true)}, 2)
	require.Equal(t, routed("127.10.0.1:8000", hv("content-length", strconv.Itoa(len(completion)))).String(), got[0].String())
	// A large body that must wait for more is refused while the large
	// tier is used up.
	got = h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(chunk[:512<<10], false)}, 1)
	if diff := cmp.Diff(refused, got[0], protocmp.Transform()); diff != "" {
		t.Fatalf("large chunked request (-want +got):\n%s", diff)
	}
	select {
	case o := <-results:
		t.Fatalf("a held stream got an answer: %v %v", o.resp, o.err)
	default:
	}

	for _, c := range cancels {
		c()
	}
	require.Eventually(t, func() bool { return pm.buffered(t) == 0 }, 5*time.Second, time.Millisecond, "closing every stream releases the budget")
	s.finish()
	require.LessOrEqual(t, s.max.Load(), int64(budget), "the accounting never exceeds the budget")
	require.GreaterOrEqual(t, s.max.Load(), int64(held*perStream), "the sampler saw the large tier full")
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
}

// Every way a stream ends gives back exactly what it held: many streams,
// each ending differently, run at once against a small budget; afterwards
// the accounting is 0, and it never exceeded the budget.
func TestBufferAccountingMixedStreams(t *testing.T) {
	const budget = 1 << 20
	pm, withM := withMetrics(t)
	h := start(t, queueConfig, threePods(), withM, func(o *extproc.Options) {
		o.MaxBufferedBytes = budget
		o.MaxRequestBodyBytes = 64 << 10
		o.MaxBufferedResponseBytes = 32 << 10
		o.RequestBodyTimeout = 300 * time.Millisecond
	})
	s := sample(t, pm)
	pad := strings.Repeat("y", 8<<10)
	good := `{"model":"m","prompt":"` + pad + `"}`
	respJSON := `{"id":"c","choices":[{"text":"` + pad + `"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

	type scenario struct {
		name string
		run  func(st extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) error
	}
	send := func(st extprocv3.ExternalProcessor_ProcessClient, msgs ...*extprocv3.ProcessingRequest) error {
		for _, m := range msgs {
			if err := st.Send(m); err != nil {
				return err
			}
		}
		return nil
	}
	// drain reads until the server ends the stream.
	drain := func(st extprocv3.ExternalProcessor_ProcessClient) error {
		for {
			if _, err := st.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	recvN := func(st extprocv3.ExternalProcessor_ProcessClient, n int) error {
		for range n {
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
		return nil
	}
	chunks := []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(good[:4000], false), body(good[4000:], true)}
	scenarios := []scenario{
		{"complete, buffered response in chunks", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			if err := send(st, chunks...); err != nil {
				return err
			}
			if err := recvN(st, 2); err != nil {
				return err
			}
			if err := send(st, respHeaders("", false, ":status", "200", "content-type", "application/json"),
				respBody(respJSON[:5000], false), respBody(respJSON[5000:], true)); err != nil {
				return err
			}
			if err := recvN(st, 2); err != nil {
				return err
			}
			return st.CloseSend()
		}},
		{"response too large to buffer", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			if err := send(st, chunks...); err != nil {
				return err
			}
			if err := recvN(st, 2); err != nil {
				return err
			}
			big := strings.Repeat("z", 20<<10)
			if err := send(st, respHeaders("", false, ":status", "200"), respBody(big, false), respBody(big, false), respBody("", true)); err != nil {
				return err
			}
			if err := recvN(st, 3); err != nil { // headers, passthrough of both chunks, end
				return err
			}
			return st.CloseSend()
		}},
		{"disconnect mid-body", func(st extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) error {
			if err := send(st, chunks[:2]...); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
			cancel()
			return nil
		}},
		{"disconnect mid-response", func(st extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) error {
			if err := send(st, chunks...); err != nil {
				return err
			}
			if err := recvN(st, 2); err != nil {
				return err
			}
			if err := send(st, respHeaders("", false, ":status", "200"), respBody(respJSON[:5000], false)); err != nil {
				return err
			}
			if err := recvN(st, 1); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
			cancel()
			return nil
		}},
		{"half-close mid-body", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			if err := send(st, chunks[:2]...); err != nil {
				return err
			}
			if err := st.CloseSend(); err != nil {
				return err
			}
			return drain(st)
		}},
		{"over the body limit", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			_ = send(st, reqHeaders("/v1/completions"), body(pad, false), body(pad, false), body(strings.Repeat(pad, 7), false))
			return drain(st)
		}},
		{"bad JSON", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			_ = send(st, reqHeaders("/v1/completions"), body(pad, false), body("}", true))
			return drain(st)
		}},
		{"protocol error mid-body", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			_ = send(st, reqHeaders("/v1/completions"), body(pad, false), reqHeaders("/v1/completions"))
			return drain(st)
		}},
		{"trailers end the body", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			if err := send(st, reqHeaders("/v1/completions"), body(good[:100], false), body(good[100:], false), reqTrailers()); err != nil {
				return err
			}
			if err := recvN(st, 3); err != nil {
				return err
			}
			return st.CloseSend()
		}},
		{"stalls until the deadline", func(st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) error {
			_ = send(st, reqHeaders("/v1/completions"), body(pad, false))
			return drain(st)
		}},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for round := range 20 {
		for _, sc := range scenarios {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				st, err := h.client.Process(ctx)
				if err != nil {
					errs <- err
					return
				}
				if err := sc.run(st, cancel); err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
					errs <- fmt.Errorf("round %d, %s: %w", round, sc.name, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Eventually(t, func() bool { return pm.buffered(t) == 0 }, 5*time.Second, time.Millisecond, "every stream gave back what it held")
	s.finish()
	require.LessOrEqual(t, s.max.Load(), int64(budget))
	require.Positive(t, s.max.Load(), "some bytes were buffered")
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
	require.Positive(t, pm.refusals(t, extproc.ReasonBodyTimeout))
}

// recvWithin receives one message, failing the test when none comes in
// time (the stream is then left to the test's cleanup).
func recvWithin(t testing.TB, st extprocv3.ExternalProcessor_ProcessClient, d time.Duration) (*extprocv3.ProcessingResponse, error) {
	t.Helper()
	type result struct {
		r   *extprocv3.ProcessingResponse
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := st.Recv()
		ch <- result{r, err}
	}()
	select {
	case res := <-ch:
		return res.r, res.err
	case <-time.After(d):
		t.Fatalf("no message within %s", d)
		return nil, nil
	}
}

// A request that is not complete within RequestBodyTimeout is answered
// with 408 body_timeout and its stream ends, also when nothing at all was
// sent; a request that was forwarded in time is not cut while its
// response is slow.
func TestRequestBodyTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	pm, withM := withMetrics(t)
	h := start(t, queueConfig, threePods(), withM, func(o *extproc.Options) { o.RequestBodyTimeout = timeout })
	want := immediate(408, "body_timeout", "RequestTimeout", "the request was not complete within 200ms")
	tests := []struct {
		name string
		msgs []*extprocv3.ProcessingRequest
	}{
		{name: "headers and part of the body, then a stall", msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(completion[:10], false)}},
		{name: "headers only, then a stall", msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions")}},
		{name: "nothing at all", msgs: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := openStream(t, h)
			t0 := time.Now()
			for _, m := range tc.msgs {
				require.NoError(t, st.Send(m))
			}
			got, err := recvWithin(t, st, 5*time.Second)
			require.NoError(t, err)
			elapsed := time.Since(t0)
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Fatalf("response (-want +got):\n%s", diff)
			}
			require.GreaterOrEqual(t, elapsed, timeout-20*time.Millisecond)
			require.Less(t, elapsed, 5*time.Second)
			// The server ended the stream, without waiting for the client.
			_, err = recvWithin(t, st, 5*time.Second)
			require.ErrorIs(t, err, io.EOF)
		})
	}
	require.Equal(t, 3.0, pm.refusals(t, extproc.ReasonBodyTimeout))
	require.Eventually(t, func() bool { return pm.buffered(t) == 0 }, 5*time.Second, time.Millisecond)

	t.Run("a forwarded request is not cut", func(t *testing.T) {
		st, _ := openStream(t, h)
		require.NoError(t, st.Send(reqHeaders("/v1/completions")))
		require.NoError(t, st.Send(body(completion, true)))
		for range 2 {
			_, err := st.Recv()
			require.NoError(t, err)
		}
		time.Sleep(2 * timeout)
		require.NoError(t, st.Send(respHeaders("", false, ":status", "200")))
		r, err := st.Recv()
		require.NoError(t, err)
		require.NotNil(t, r.GetResponseHeaders())
		require.NoError(t, st.Send(respBody(`{"ok":true}`, true)))
		r, err = st.Recv()
		require.NoError(t, err)
		require.NotNil(t, r.GetResponseBody())
		require.NoError(t, st.CloseSend())
		_, err = st.Recv()
		require.ErrorIs(t, err, io.EOF)
	})
	require.Equal(t, 3.0, pm.refusals(t, extproc.ReasonBodyTimeout))
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
}
