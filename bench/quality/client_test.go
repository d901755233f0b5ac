package quality

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/modelsim"
)

// serveSim runs a real modelsim server on loopback and returns its base
// URL; it stops when the test ends.
func serveSim(t *testing.T, id string) string {
	t.Helper()
	cfg := modelsim.DefaultConfig()
	cfg.TimeScale = 0.01
	sim, err := modelsim.New(cfg, modelsim.WithID(id))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, sim.Start(ctx))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Close(); <-done; cancel(); _ = sim.Close() })
	return "http://" + ln.Addr().String()
}

// TestReplayAgainstModelsim replays a small shared-prefix trace against a
// real modelsim over HTTP: every request streams its tokens, TTFT is
// measured, the endpoint is recorded, the step hook runs at every
// boundary, and the prefix-cache counters scraped from /metrics show the
// shared prefix being hit.
func TestReplayAgainstModelsim(t *testing.T) {
	base := serveSim(t, "sim-a")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	w := Workload{Name: "t", Seed: 3, Prefixes: 2, PrefixTokens: 256, QuestionTokens: 32, OutputTokens: 5,
		Steps: []Step{{Rate: 100, Duration: 200 * time.Millisecond}, {Rate: 100, Duration: 200 * time.Millisecond}}}
	reqs, err := Generate(w)
	require.NoError(t, err)
	require.NotEmpty(t, reqs)
	var hooks []int // OnStep calls are sequential: no lock needed
	scrapes := make([][]Counters, len(w.Steps)+1)
	rp := &Replayer{URL: base, Model: modelsim.DefaultModel, Client: client, OnStep: func(i int) {
		hooks = append(hooks, i)
		c, err := Scrape(context.Background(), client, []string{base})
		assert.NoError(t, err)
		scrapes[i] = c
	}}
	start := time.Now()
	outs := rp.Replay(context.Background(), w, reqs)
	assert.GreaterOrEqual(t, time.Since(start), w.StepStart(len(w.Steps)), "the replay lasts the trace")
	assert.Equal(t, []int{0, 1, 2}, hooks, "in order")
	assert.Equal(t, Counters{}, scrapes[0][0], "step 0 is scraped before the first request")
	require.Len(t, outs, len(reqs))
	for i, o := range outs {
		require.True(t, o.OK(), "request %d: %+v", i, o)
		assert.Equal(t, reqs[i].ID, o.ID)
		assert.Equal(t, 5, o.Tokens)
		assert.Equal(t, 5, o.UsageTokens)
		assert.Equal(t, "sim-a", o.Endpoint)
		assert.Positive(t, o.TTFT)
		assert.GreaterOrEqual(t, o.End, o.TTFT)
	}
	res := Summarize(w, "direct", outs, scrapes, []string{"sim-a"})
	require.Len(t, res, 2)
	total := 0
	for _, r := range res {
		total += r.OK
		assert.Zero(t, r.Errors)
		assert.Positive(t, r.TTFTp90)
	}
	assert.Equal(t, len(reqs), total)
	// Two prefixes of 256 tokens and 32-token questions: after the first
	// request of each prefix, 256 of 288 tokens are hits.
	require.Positive(t, res[1].HitRate)
	assert.Greater(t, res[1].HitRate, 0.8)
	assert.LessOrEqual(t, res[1].HitRate, 256.0/288+1e-9)
}

// TestReplayNon200 records the status and body of a refused request.
func TestReplayNon200(t *testing.T) {
	base := serveSim(t, "sim-b")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	w := Workload{Name: "t", Prefixes: 1, QuestionTokens: 4, OutputTokens: 1, Steps: []Step{{Rate: 1, Duration: time.Millisecond}}}
	rp := &Replayer{URL: base, Model: "no-such-model", Client: client}
	o := rp.Replay(context.Background(), w, []Request{{ID: 0}})[0]
	assert.False(t, o.OK())
	assert.Equal(t, http.StatusNotFound, o.Status)
	assert.Contains(t, o.Err, "status 404")
	assert.Contains(t, o.Err, "does not exist")
}
