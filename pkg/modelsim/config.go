package modelsim

import (
	"fmt"
	"github.com/switchyard-ai/switchyard/pkg/fielderr"
	"math"
	"time"
)

// Defaults of [DefaultConfig]. README.md explains how they were chosen: an
// 8B model in bf16 on one data-centre GPU, with the batch and the KV cache
// kept deliberately small so that load shows up at demo traffic levels.
const (
	DefaultModel            = "meta-llama/Llama-3.1-8B-Instruct"
	DefaultMaxRunning       = 16
	DefaultMaxWaiting       = 0 // unbounded, like vLLM
	DefaultKVBlocks         = 2048
	DefaultBlockSize        = 16
	DefaultMaxModelLen      = 8192
	DefaultMaxBatchedTokens = 2048
	DefaultPrefillPerToken  = 100 * time.Microsecond
	DefaultDecodeBase       = 15 * time.Millisecond
	DefaultDecodePerSeq     = 500 * time.Microsecond
	DefaultMaxTokens        = 128
	DefaultMaxLoRAs         = 1
)

// Config describes one simulated model server. Start from [DefaultConfig]
// and change what you need: [Config.Validate] rejects zero values where they
// make no sense instead of silently replacing them.
type Config struct {
	// Model is the served model name (vLLM's --served-model-name). Requests
	// without a model use it; requests naming another model (and no LoRA
	// adapter) get 404. It is the model_name label of every metric.
	Model string
	// MaxRunning is the maximum number of running sequences in the
	// continuous batch (vLLM's max_num_seqs). At least 1.
	MaxRunning int
	// MaxWaiting bounds the waiting queue: a request arriving when that many
	// are already waiting is answered 429. 0 means unbounded, as in vLLM.
	// Preempted sequences always go back to the queue, whatever the bound.
	MaxWaiting int
	// KVBlocks is the number of KV-cache blocks (vLLM's num_gpu_blocks).
	KVBlocks int
	// BlockSize is the number of tokens per KV block (vLLM's block_size).
	BlockSize int
	// MaxModelLen is the context length: prompt plus output tokens of one
	// request. It must fit into the KV cache (MaxModelLen <= KVBlocks ×
	// BlockSize), otherwise a single request could never be admitted.
	MaxModelLen int
	// MaxBatchedTokens is the token budget of one step (vLLM's
	// max_num_batched_tokens): one per decoding sequence plus prefill chunks.
	// Long prompts are prefilled in chunks over several steps. 0 means no
	// limit; otherwise it must be at least MaxRunning.
	MaxBatchedTokens int
	// PrefillPerToken is the prefill time per uncached prompt token.
	PrefillPerToken time.Duration
	// DecodeBase is the duration of a step with one sequence in it (one
	// decoded token at batch size 1).
	DecodeBase time.Duration
	// DecodePerSeq is the extra step time for each additional sequence in
	// the step.
	DecodePerSeq time.Duration
	// DefaultMaxTokens is the number of output tokens of a request without
	// max_tokens (capped by MaxModelLen minus the prompt). Such requests
	// finish with finish_reason "stop"; requests with max_tokens generate
	// exactly that many and finish with "length".
	DefaultMaxTokens int
	// TimeScale multiplies every simulated duration before the engine sleeps
	// (1 = real time, 0.01 = a hundred times faster). 0 means the engine
	// never sleeps: steps run back to back and only their order is
	// simulated. It does not scale the extra latency fault.
	TimeScale float64
	// LoRAs are adapter names accepted as the request's model; they share
	// the base model's metrics (model_name is the base model) and appear in
	// vllm:lora_requests_info and /v1/models.
	LoRAs []string
	// MaxLoRAs is the number of distinct adapters that may run at once
	// (vLLM's max_loras); a waiting request whose adapter cannot be loaded is
	// skipped until one frees up. At least 1 when LoRAs is set.
	MaxLoRAs int
	// Seed makes generated text, response ids and injected errors
	// reproducible. Only timing is not deterministic.
	Seed uint64
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Model:            DefaultModel,
		MaxRunning:       DefaultMaxRunning,
		MaxWaiting:       DefaultMaxWaiting,
		KVBlocks:         DefaultKVBlocks,
		BlockSize:        DefaultBlockSize,
		MaxModelLen:      DefaultMaxModelLen,
		MaxBatchedTokens: DefaultMaxBatchedTokens,
		PrefillPerToken:  DefaultPrefillPerToken,
		DecodeBase:       DefaultDecodeBase,
		DecodePerSeq:     DefaultDecodePerSeq,
		DefaultMaxTokens: DefaultMaxTokens,
		TimeScale:        1,
		MaxLoRAs:         DefaultMaxLoRAs,
	}
}

// Validate reports every invalid field, each error naming the field.
func (c Config) Validate() error {
	var errs fielderr.List[configSubject]
	bad := errs.Add
	if c.Model == "" {
		bad("Model", "must not be empty")
	}
	if c.MaxRunning < 1 {
		bad("MaxRunning", "must be at least 1, got %d", c.MaxRunning)
	}
	if c.MaxWaiting < 0 {
		bad("MaxWaiting", "must be 0 (unbounded) or positive, got %d", c.MaxWaiting)
	}
	if c.KVBlocks < 1 {
		bad("KVBlocks", "must be at least 1, got %d", c.KVBlocks)
	}
	if c.BlockSize < 1 || c.BlockSize > 1024 {
		bad("BlockSize", "must be between 1 and 1024, got %d", c.BlockSize)
	}
	if c.MaxModelLen < 1 {
		bad("MaxModelLen", "must be at least 1, got %d", c.MaxModelLen)
	} else if c.KVBlocks >= 1 && c.BlockSize >= 1 && c.MaxModelLen > c.KVBlocks*c.BlockSize {
		bad("MaxModelLen", "%d tokens do not fit into KVBlocks×BlockSize = %d tokens", c.MaxModelLen, c.KVBlocks*c.BlockSize)
	}
	if c.MaxBatchedTokens < 0 {
		bad("MaxBatchedTokens", "must be 0 (no limit) or positive, got %d", c.MaxBatchedTokens)
	} else if c.MaxBatchedTokens > 0 && c.MaxBatchedTokens < c.MaxRunning {
		bad("MaxBatchedTokens", "must be at least MaxRunning (%d) so every running sequence can decode, got %d", c.MaxRunning, c.MaxBatchedTokens)
	}
	if c.PrefillPerToken < 0 {
		bad("PrefillPerToken", "must not be negative, got %s", c.PrefillPerToken)
	}
	if c.DecodeBase < 0 {
		bad("DecodeBase", "must not be negative, got %s", c.DecodeBase)
	}
	if c.DecodePerSeq < 0 {
		bad("DecodePerSeq", "must not be negative, got %s", c.DecodePerSeq)
	}
	if c.DefaultMaxTokens < 1 {
		bad("DefaultMaxTokens", "must be at least 1, got %d", c.DefaultMaxTokens)
	}
	if math.IsNaN(c.TimeScale) || math.IsInf(c.TimeScale, 0) || c.TimeScale < 0 {
		bad("TimeScale", "must be a finite number >= 0, got %v", c.TimeScale)
	}
	seen := make(map[string]bool, len(c.LoRAs))
	for i, name := range c.LoRAs {
		field := fmt.Sprintf("LoRAs[%d]", i)
		switch {
		case name == "":
			bad(field, "must not be empty")
		case name == c.Model:
			bad(field, "%q is the base model name", name)
		case seen[name]:
			bad(field, "duplicate adapter %q", name)
		}
		seen[name] = true
	}
	if c.MaxLoRAs < 0 {
		bad("MaxLoRAs", "must not be negative, got %d", c.MaxLoRAs)
	} else if len(c.LoRAs) > 0 && c.MaxLoRAs < 1 {
		bad("MaxLoRAs", "must be at least 1 when LoRAs are configured, got %d", c.MaxLoRAs)
	}
	return errs.Err()
}

// scale converts a simulated duration into the time the engine sleeps.
func (c Config) scale(d time.Duration) time.Duration {
	if c.TimeScale == 1 {
		return d
	}
	return time.Duration(float64(d) * c.TimeScale)
}

// configSubject names what a Config.Validate error is about ("invalid modelsim config: ...").
type configSubject struct{}

func (configSubject) Subject() string { return "modelsim config" }
