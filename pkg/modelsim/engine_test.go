package modelsim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// engineConfig is a small, fast engine: 4-token blocks (16 bytes), no
// sleeping, round step costs.
func engineConfig() Config {
	c := DefaultConfig()
	c.BlockSize = 4
	c.KVBlocks = 64
	c.MaxModelLen = 256
	c.MaxRunning = 4
	c.MaxBatchedTokens = 0
	c.PrefillPerToken = time.Millisecond
	c.DecodeBase = 10 * time.Millisecond
	c.DecodePerSeq = time.Millisecond
	c.TimeScale = 0
	return c
}

func newTestEngine(t testing.TB, c Config) *engine {
	t.Helper()
	require.NoError(t, c.Validate())
	return newEngine(c, newEngineMetrics(prometheus.Labels{"model_name": c.Model}), logr.Discard())
}

// text returns n bytes of deterministic text that differs per tag from the
// first byte on.
func text(tag string, n int) string {
	var b strings.Builder
	x := rootHash(0, tag)
	for b.Len() < n {
		x = splitmix64(x)
		b.WriteByte('a' + byte(x%26))
	}
	return b.String()
}

func mkSeq(e *engine, prompt string, maxTokens int, lora string) *seq {
	hashes := appendBlockHashes(nil, rootHash(e.cfg.Seed, lora), prompt, e.cfg.BlockSize)
	return newSeq(lora, countTokens(len(prompt)), maxTokens, finishLength, hashes)
}

func submit(t testing.TB, e *engine, seqs ...*seq) {
	t.Helper()
	for _, s := range seqs {
		require.NoError(t, e.submit(s))
	}
}

// drain steps the engine until every sequence has ended.
func drain(t testing.TB, e *engine, seqs ...*seq) {
	t.Helper()
	for range 100000 {
		done := true
		for _, s := range seqs {
			if !s.loadState().terminal() {
				done = false
			}
		}
		if done {
			return
		}
		require.True(t, e.step(), "engine idle with sequences still pending")
	}
	t.Fatal("sequences did not finish")
}

func ttft(s *seq) time.Duration { return s.simFirstToken - s.simArrival }

func TestEnginePrefixHits(t *testing.T) {
	base := text("base", 64) // 4 blocks of 16 bytes = 16 tokens
	tests := []struct {
		name       string
		first      string
		second     string
		secondLoRA string
		wantCached int32
	}{
		{"identical prompt recomputes its last block", base, base, "", 12},
		{"longer prompt hits every shared block", base, base + text("tail", 20), "", 16},
		{"half shared prefix", base, base[:32] + text("other", 32), "", 8},
		{"different first block", base, text("x", 16) + base[16:], "", 0},
		{"shorter than a block", base, base[:10], "", 0},
		{"another adapter never shares", base, base, "adapter", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := engineConfig()
			c.LoRAs = []string{"adapter"}
			e := newTestEngine(t, c)
			a := mkSeq(e, tt.first, 3, "")
			submit(t, e, a)
			drain(t, e, a)
			assert.Equal(t, int32(0), a.cached.Load(), "first request hits an empty cache")

			b := mkSeq(e, tt.second, 3, tt.secondLoRA)
			submit(t, e, b)
			drain(t, e, b)
			assert.Equal(t, tt.wantCached, b.cached.Load())
			st := e.stats()
			assert.Equal(t, uint64(tt.wantCached), st.PrefixHitTokens)
			assert.Equal(t, uint64(a.promptTokens+b.promptTokens), st.PromptTokens)
			assert.Equal(t, 0, st.KVUsedBlocks, "finished requests hold no blocks")
			assert.Positive(t, st.KVCachedBlocks, "finished prompts stay cached")
		})
	}
}

func TestKVCacheLRUOrder(t *testing.T) {
	pin := func(t *testing.T, c *kvCache, hs ...uint64) []*block {
		t.Helper()
		var bs []*block
		for _, h := range hs {
			b := c.pin(h)
			require.NotNil(t, b)
			bs = append(bs, b)
		}
		return bs
	}
	tests := []struct {
		name        string
		run         func(t *testing.T, c *kvCache)
		wantCached  []uint64 // in eviction order
		wantEvicted uint64
	}{
		{
			name: "a released prefix is evicted deepest block first",
			run: func(t *testing.T, c *kvCache) {
				c.release(pin(t, c, 1, 2, 3))
			},
			wantCached: []uint64{3, 2, 1},
		},
		{
			name: "older prefixes go before newer ones",
			run: func(t *testing.T, c *kvCache) {
				c.release(pin(t, c, 1, 2))
				c.release(pin(t, c, 3, 4))
			},
			wantCached: []uint64{2, 1, 4, 3},
		},
		{
			name: "a hit makes a block recently used",
			run: func(t *testing.T, c *kvCache) {
				c.release(pin(t, c, 1, 2))
				c.release(pin(t, c, 3, 4))
				c.release(pin(t, c, 1))
			},
			wantCached: []uint64{2, 4, 3, 1},
		},
		{
			name: "allocation evicts the least recently used",
			run: func(t *testing.T, c *kvCache) {
				c.release(pin(t, c, 1, 2))
				c.release(pin(t, c, 3, 4))
				pin(t, c, 5, 6) // cache full (4 blocks): evicts 2 then 1
			},
			wantCached:  []uint64{4, 3},
			wantEvicted: 2,
		},
		{
			name: "pinned and private blocks are never evicted",
			run: func(t *testing.T, c *kvCache) {
				pin(t, c, 1)
				c.release(pin(t, c, 2))
				require.True(t, c.allocPrivate())
				require.True(t, c.allocPrivate())
				require.True(t, c.allocPrivate()) // evicts 2
				require.False(t, c.allocPrivate())
				require.Nil(t, c.pin(9))
			},
			wantCached:  nil,
			wantEvicted: 1,
		},
		{
			name: "shared blocks are counted once and cached when the last user leaves",
			run: func(t *testing.T, c *kvCache) {
				a := pin(t, c, 1, 2)
				b := pin(t, c, 1, 2)
				require.Equal(t, 2, c.used())
				c.release(a)
				require.Equal(t, 2, c.used())
				c.release(b)
			},
			wantCached: []uint64{2, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newKVCache(4)
			tt.run(t, c)
			var got []uint64
			for b := c.lru.head; b != nil; b = b.next {
				got = append(got, b.hash)
			}
			assert.Equal(t, tt.wantCached, got)
			assert.Equal(t, tt.wantEvicted, c.evictions)
			assert.LessOrEqual(t, c.used()+c.cached(), c.total)
		})
	}
}

func TestEngineEvictsLeastRecentlyUsedPrompt(t *testing.T) {
	c := engineConfig()
	c.KVBlocks = 8
	c.MaxModelLen = 32
	e := newTestEngine(t, c)
	p1, p2 := text("p1", 48), text("p2", 48) // 3 blocks each
	for _, p := range []string{p1, p2} {
		s := mkSeq(e, p, 1, "")
		submit(t, e, s)
		drain(t, e, s)
	}
	require.Equal(t, 6, e.stats().KVCachedBlocks)
	// 5 blocks needed: the 2 empty ones plus 3 evicted, all from p1.
	big := mkSeq(e, text("big", 80), 1, "")
	submit(t, e, big)
	drain(t, e, big)
	assert.Equal(t, uint64(3), e.stats().Evictions)

	again2 := mkSeq(e, p2, 1, "")
	submit(t, e, again2)
	drain(t, e, again2)
	assert.Equal(t, int32(8), again2.cached.Load(), "p2 was used more recently and survived")
	again1 := mkSeq(e, p1, 1, "")
	submit(t, e, again1)
	drain(t, e, again1)
	assert.Equal(t, int32(0), again1.cached.Load(), "p1 was evicted")
}

func TestEngineKVUsageRisesWithRunning(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("running=%d", n), func(t *testing.T) {
			c := engineConfig()
			c.KVBlocks = 100
			c.MaxRunning = 8
			e := newTestEngine(t, c)
			var seqs []*seq
			for i := range n {
				seqs = append(seqs, mkSeq(e, text(string(rune('a'+i)), 32), 10, "")) // 8 tokens = 2 blocks
			}
			submit(t, e, seqs...)
			require.True(t, e.step())
			st := e.stats()
			assert.Equal(t, n, st.Running)
			assert.Equal(t, 2*n, st.KVUsedBlocks)
			assert.InDelta(t, float64(2*n)/100, st.KVUsage, 1e-9)
			drain(t, e, seqs...)
			st = e.stats()
			assert.Equal(t, 0, st.KVUsedBlocks)
			assert.Zero(t, st.KVUsage, "cached blocks of finished requests do not count as used")
			assert.Equal(t, 2*n, st.KVCachedBlocks)
		})
	}
}

func TestEngineQueuesAtMaxRunning(t *testing.T) {
	for _, maxRunning := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("maxRunning=%d", maxRunning), func(t *testing.T) {
			c := engineConfig()
			c.MaxRunning = maxRunning
			e := newTestEngine(t, c)
			var seqs []*seq
			for i := range 6 {
				seqs = append(seqs, mkSeq(e, text(string(rune('a'+i)), 20), 3, ""))
			}
			submit(t, e, seqs...)
			st := e.stats()
			assert.Equal(t, 6, st.Waiting)
			require.True(t, e.step())
			st = e.stats()
			assert.Equal(t, maxRunning, st.Running)
			assert.Equal(t, 6-maxRunning, st.Waiting)
			// FIFO: requests get their first token in arrival order.
			drain(t, e, seqs...)
			for i := 1; i < len(seqs); i++ {
				assert.LessOrEqual(t, seqs[i-1].simFirstToken, seqs[i].simFirstToken, "request %d overtook %d", i, i-1)
			}
			assert.Greater(t, ttft(seqs[5]), ttft(seqs[0]), "queued requests wait")
		})
	}
}

func TestEngineTTFT(t *testing.T) {
	c := engineConfig() // prefill 1ms/token, decode base 10ms
	tests := []struct {
		name       string
		promptLen  int // bytes
		warm       bool
		wantTTFT   time.Duration
		wantCached int32
	}{
		{"uncached 64 tokens", 256, false, 10*time.Millisecond + 64*time.Millisecond, 0},
		{"cached 64 tokens recomputes one block", 256, true, 10*time.Millisecond + 4*time.Millisecond, 60},
		{"uncached 10 tokens", 40, false, 10*time.Millisecond + 10*time.Millisecond, 0},
		{"cached 10 tokens keeps the partial block", 40, true, 10*time.Millisecond + 2*time.Millisecond, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, c)
			p := text("ttft", tt.promptLen)
			if tt.warm {
				w := mkSeq(e, p, 1, "")
				submit(t, e, w)
				drain(t, e, w)
			}
			s := mkSeq(e, p, 2, "")
			submit(t, e, s)
			drain(t, e, s)
			assert.Equal(t, tt.wantTTFT, ttft(s))
			assert.Equal(t, tt.wantCached, s.cached.Load())
		})
	}
}

func TestEngineStepDuration(t *testing.T) {
	tests := []struct {
		name     string
		running  int
		maxBatch int
		prompt   int // bytes per request
		want     []time.Duration
	}{
		// step 1: prefill of n×8 tokens; then decode steps of n sequences.
		{"one sequence", 1, 0, 32, []time.Duration{18 * time.Millisecond, 10 * time.Millisecond}},
		{"four sequences", 4, 0, 32, []time.Duration{(10 + 3 + 32) * time.Millisecond, 13 * time.Millisecond}},
		{"chunked prefill", 1, 16, 160, []time.Duration{26 * time.Millisecond, 26 * time.Millisecond, 18 * time.Millisecond, 10 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := engineConfig()
			c.MaxBatchedTokens = tt.maxBatch
			e := newTestEngine(t, c)
			var seqs []*seq
			for i := range tt.running {
				seqs = append(seqs, mkSeq(e, text(string(rune('a'+i)), tt.prompt), 3, ""))
			}
			submit(t, e, seqs...)
			for i, want := range tt.want {
				before := e.stats().SimTime
				require.True(t, e.step())
				assert.Equal(t, want, e.stats().SimTime-before, "step %d", i)
			}
		})
	}
}

func TestEnginePreemption(t *testing.T) {
	c := engineConfig()
	c.KVBlocks = 6 // 24 tokens
	c.MaxModelLen = 24
	e := newTestEngine(t, c)
	a := mkSeq(e, text("a", 32), 12, "") // 8 prompt tokens, 20 in all: 5 blocks
	b := mkSeq(e, text("b", 32), 12, "")
	submit(t, e, a, b)
	require.True(t, e.step())
	require.Equal(t, 2, e.stats().Running)

	sawPreemption := false
	for !a.loadState().terminal() {
		require.True(t, e.step())
		st := e.stats()
		assert.LessOrEqual(t, st.KVUsedBlocks, 6)
		if st.Preemptions > 0 && !sawPreemption {
			sawPreemption = true
			assert.Equal(t, stateWaiting, b.loadState(), "the newest sequence is preempted")
			assert.Equal(t, stateRunning, a.loadState())
			assert.Positive(t, b.generated.Load(), "preempted sequence keeps its output")
		}
	}
	require.True(t, sawPreemption)
	drain(t, e, b)
	assert.Equal(t, int32(12), a.generated.Load())
	assert.Equal(t, int32(12), b.generated.Load())
	assert.Positive(t, b.cached.Load(), "readmission hits the preempted sequence's cached prompt")
	st := e.stats()
	assert.Equal(t, 0, st.KVUsedBlocks)
	assert.Equal(t, uint64(2), st.Served)
	assert.Equal(t, uint64(16), st.PromptTokens, "prompt tokens are counted once per request")
}

func TestEngineAbortFreesEverything(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, e *engine, s *seq)
	}{
		{"waiting", func(t *testing.T, e *engine, s *seq) {}},
		{"running", func(t *testing.T, e *engine, s *seq) { require.True(t, e.step()) }},
		{"running with output", func(t *testing.T, e *engine, s *seq) {
			require.True(t, e.step())
			require.True(t, e.step())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := engineConfig()
			c.MaxRunning = 2
			c.LoRAs = []string{"x"}
			e := newTestEngine(t, c)
			var seqs []*seq
			for i := range 4 {
				seqs = append(seqs, mkSeq(e, text(string(rune('a'+i)), 40), 50, "x"))
			}
			submit(t, e, seqs...)
			tt.setup(t, e, seqs[0])
			for _, s := range seqs {
				e.abort(s)
				assert.Equal(t, stateAborted, s.loadState())
			}
			st := e.stats()
			assert.Zero(t, st.Running)
			assert.Zero(t, st.Waiting)
			assert.Zero(t, st.KVUsedBlocks)
			assert.Empty(t, st.RunningLoRAs)
			assert.Empty(t, st.WaitingLoRAs)
			assert.Equal(t, uint64(4), st.Aborted)
			assert.False(t, e.step(), "nothing left to do")
		})
	}
}

func TestEngineAbortDuringStep(t *testing.T) {
	e := newTestEngine(t, engineConfig())
	a, b := mkSeq(e, text("a", 40), 5, ""), mkSeq(e, text("b", 40), 5, "")
	submit(t, e, a, b)
	e.mu.Lock()
	plan, d := e.schedule()
	e.mu.Unlock()
	require.Len(t, plan, 2)
	e.abort(a) // the client leaves while the step is "on the GPU"
	e.mu.Lock()
	e.apply(plan, d, 0)
	e.mu.Unlock()
	assert.Zero(t, a.generated.Load())
	assert.Equal(t, int32(1), b.generated.Load())
	st := e.stats()
	assert.Equal(t, 1, st.Running)
	assert.Equal(t, 3, st.KVUsedBlocks, "only b's blocks remain (10 tokens)")
	e.abort(a) // twice is harmless
	drain(t, e, b)
	e.abort(b) // after the end too
	assert.Equal(t, stateFinished, b.loadState())
	assert.Equal(t, uint64(1), e.stats().Aborted)
}

func TestEngineLoRALimit(t *testing.T) {
	c := engineConfig()
	c.LoRAs = []string{"a", "b"}
	c.MaxLoRAs = 1
	e := newTestEngine(t, c)
	a1, b1, a2 := mkSeq(e, text("1", 20), 5, "a"), mkSeq(e, text("2", 20), 5, "b"), mkSeq(e, text("3", 20), 5, "a")
	submit(t, e, a1, b1, a2)
	require.True(t, e.step())
	st := e.stats()
	assert.Equal(t, []string{"a"}, st.RunningLoRAs)
	assert.Equal(t, []string{"b"}, st.WaitingLoRAs)
	assert.Equal(t, stateRunning, a2.loadState(), "a request for a loaded adapter overtakes one that cannot load")
	assert.Equal(t, stateWaiting, b1.loadState())
	drain(t, e, a1, a2, b1)
	assert.Greater(t, b1.simFirstToken, a2.simFirstToken)
}

func TestEngineQueueBound(t *testing.T) {
	c := engineConfig()
	c.MaxWaiting = 2
	e := newTestEngine(t, c)
	submit(t, e, mkSeq(e, "x", 1, ""), mkSeq(e, "y", 1, ""))
	assert.ErrorIs(t, e.submit(mkSeq(e, "z", 1, "")), ErrQueueFull)
	assert.Equal(t, uint64(1), e.stats().Rejected)
}

func TestEngineShutdown(t *testing.T) {
	c := engineConfig()
	c.MaxRunning = 1
	e := newTestEngine(t, c)
	a, b := mkSeq(e, "first", 5, ""), mkSeq(e, "second", 5, "")
	submit(t, e, a, b)
	require.True(t, e.step())
	e.shutdown(ErrClosed)
	e.shutdown(ErrClosed)
	for _, s := range []*seq{a, b} {
		assert.Equal(t, stateFailed, s.loadState())
		assert.ErrorIs(t, s.err, ErrClosed)
	}
	st := e.stats()
	assert.Zero(t, st.Running+st.Waiting+st.KVUsedBlocks)
	assert.Equal(t, uint64(2), st.Failed)
	assert.ErrorIs(t, e.submit(mkSeq(e, "late", 1, "")), ErrClosed)
}

func TestEngineLoopIdlesAndStops(t *testing.T) {
	c := engineConfig()
	c.TimeScale = 0.01
	e := newTestEngine(t, c)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.run(ctx, nil)
	}()
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, e.stats().Steps, "an idle engine runs no steps")

	s := mkSeq(e, "hello world", 4, "")
	submit(t, e, s)
	require.Eventually(t, func() bool { return s.loadState() == stateFinished }, 5*time.Second, time.Millisecond)
	steps := e.stats().Steps
	assert.Equal(t, uint64(4), steps)
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, steps, e.stats().Steps, "the engine goes idle again")

	slow := mkSeq(e, "a long one", 1000, "")
	submit(t, e, slow)
	cancel()
	<-done
	assert.Equal(t, stateFailed, slow.loadState(), "stopping the loop fails what is in flight")
}
