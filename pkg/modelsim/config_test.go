package modelsim

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	assert.Equal(t, DefaultModel, c.Model)
	assert.Equal(t, 1.0, c.TimeScale)
	assert.LessOrEqual(t, c.MaxModelLen, c.KVBlocks*c.BlockSize)
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // substrings, one per expected error
	}{
		{"empty model", func(c *Config) { c.Model = "" }, []string{"Model: must not be empty"}},
		{"no running slots", func(c *Config) { c.MaxRunning = 0; c.MaxBatchedTokens = 0 }, []string{"MaxRunning: must be at least 1, got 0"}},
		{"negative waiting bound", func(c *Config) { c.MaxWaiting = -1 }, []string{"MaxWaiting: must be 0 (unbounded) or positive, got -1"}},
		{"no KV blocks", func(c *Config) { c.KVBlocks = 0 }, []string{"KVBlocks: must be at least 1, got 0"}},
		{"block size", func(c *Config) { c.BlockSize = 2048 }, []string{"BlockSize: must be between 1 and 1024, got 2048"}},
		{"context larger than the cache", func(c *Config) { c.KVBlocks = 10 }, []string{"MaxModelLen: 8192 tokens do not fit into KVBlocks×BlockSize = 160 tokens"}},
		{"no context", func(c *Config) { c.MaxModelLen = 0 }, []string{"MaxModelLen: must be at least 1, got 0"}},
		{"budget below the batch", func(c *Config) { c.MaxBatchedTokens = 8 }, []string{"MaxBatchedTokens: must be at least MaxRunning (16)"}},
		{"negative budget", func(c *Config) { c.MaxBatchedTokens = -1 }, []string{"MaxBatchedTokens: must be 0 (no limit) or positive"}},
		{"negative durations", func(c *Config) {
			c.PrefillPerToken, c.DecodeBase, c.DecodePerSeq = -1, -time.Second, -time.Millisecond
		}, []string{"PrefillPerToken: must not be negative", "DecodeBase: must not be negative", "DecodePerSeq: must not be negative"}},
		{"default max tokens", func(c *Config) { c.DefaultMaxTokens = 0 }, []string{"DefaultMaxTokens: must be at least 1, got 0"}},
		{"negative time scale", func(c *Config) { c.TimeScale = -1 }, []string{"TimeScale: must be a finite number >= 0, got -1"}},
		{"NaN time scale", func(c *Config) { c.TimeScale = math.NaN() }, []string{"TimeScale: must be a finite number >= 0, got NaN"}},
		{"bad adapters", func(c *Config) { c.LoRAs = []string{"a", "", "a", DefaultModel} }, []string{
			"LoRAs[1]: must not be empty", `LoRAs[2]: duplicate adapter "a"`, `LoRAs[3]: "meta-llama/Llama-3.1-8B-Instruct" is the base model name`}},
		{"adapters without slots", func(c *Config) { c.LoRAs = []string{"a"}; c.MaxLoRAs = 0 }, []string{"MaxLoRAs: must be at least 1 when LoRAs are configured, got 0"}},
		{"negative adapter slots", func(c *Config) { c.MaxLoRAs = -2 }, []string{"MaxLoRAs: must not be negative, got -2"}},
		{"everything at once", func(c *Config) { c.Model = ""; c.KVBlocks = -1; c.TimeScale = math.Inf(1) }, []string{"Model:", "KVBlocks:", "TimeScale:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w)
			}
			_, err = New(c)
			assert.ErrorContains(t, err, "invalid modelsim config")
		})
	}
}

func TestConfigIsCopied(t *testing.T) {
	c := DefaultConfig()
	c.LoRAs = []string{"a"}
	s, err := New(c)
	require.NoError(t, err)
	c.LoRAs[0] = "changed"
	got := s.Config()
	assert.Equal(t, []string{"a"}, got.LoRAs)
	got.LoRAs[0] = "again"
	assert.Equal(t, []string{"a"}, s.Config().LoRAs)
	require.NoError(t, s.Close())
}
