// Package prefix implements GIE's approximate prefix-cache routing: the
// approx-prefix-cache-producer data producer and the prefix-cache-scorer.
//
// The producer splits the prompt into blocks of blockSizeTokens×4 bytes,
// chains their xxhash64 hashes (seeded by the target model and the cache
// salt) and looks them up in an in-memory index of the blocks recently sent
// to each endpoint. It stores the result as a scheduling.PrefixMatch under
// scheduling.PrefixMatchKey. After scheduling, its PreRequest hook records
// the prompt's blocks for the chosen endpoint (and for the target of a
// profile named "prefill"), so the index learns from its own routing.
//
// The scorer reads the PrefixMatch and scores matched/total blocks. It takes
// the same parameters as the producer, so GIE configurations that set them
// on the scorer load unchanged: when a configuration has no producer, the
// loader creates one from the scorer's parameters (see
// Scorer.DefaultProducer).
package prefix

import (
	"errors"
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

const (
	// ProducerType is the data producer's plugin type.
	ProducerType = "approx-prefix-cache-producer"
	// ScorerType is the scorer's plugin type.
	ScorerType = "prefix-cache-scorer"
)

const (
	// charsPerToken is the number of prompt bytes assumed per token.
	charsPerToken = 4
	// prefillProfile is the profile name whose target also learns the
	// prompt (P/D disaggregation), as in GIE.
	prefillProfile = "prefill"
)

// Upper bounds of the size parameters. They keep every derived quantity
// (block bytes = blockSizeTokens × 4, hashes per request, matched bytes =
// blocks × block bytes, LRU node indices) far from overflow, also with a
// 32-bit int, and bound the memory one request or one endpoint can cost.
const (
	// MaxBlockSizeTokens bounds blockSizeTokens (and the engine's block
	// size used by autoTune): 65536 tokens, 256 KiB of prompt per block.
	MaxBlockSizeTokens = 1 << 16
	// MaxPrefixBlocks bounds maxPrefixBlocksToMatch, and so the hashes of
	// one request: 1048576 blocks, 8 MiB of hashes.
	MaxPrefixBlocks = 1 << 20
	// MaxPrefixTokens bounds maxPrefixTokensToMatch: 1048576 tokens, so
	// maxPrefixTokensToMatch / block size never exceeds MaxPrefixBlocks.
	MaxPrefixTokens = 1 << 20
	// MaxLRUCapacityPerServer bounds lruCapacityPerServer (and the
	// engine's number of KV-cache blocks used by autoTune): 16777216 block
	// hashes per endpoint.
	MaxLRUCapacityPerServer = 1 << 24
)

// Params configures both plugins of this package. Keys are those of GIE
// v1.0 to v1.5.
//
// Precedence, as in GIE v1.5: blockSizeTokens is the block size; the
// deprecated character sizes blockSize (v1.3) and hashBlockSize (v1.0) are
// accepted so old configurations load, but they are ignored when
// blockSizeTokens > 0 and are an error when blockSizeTokens <= 0 (GIE v1.5
// does not convert them). With autoTune the block size of the first
// candidate's KV cache, when the engine reports it, wins over
// blockSizeTokens. maxPrefixTokensToMatch > 0 wins over
// maxPrefixBlocksToMatch.
type Params struct {
	// AutoTune takes the block size from the first candidate's KV-cache
	// block size and each endpoint's index capacity from its number of KV
	// cache blocks, when the model server reports them. Default true.
	AutoTune bool `json:"autoTune"`
	// BlockSizeTokens is the block size in tokens (one token is taken as 4
	// bytes of prompt). In [0, MaxBlockSizeTokens]. Default 16. Must be > 0
	// when autoTune is false; 0 with autoTune means "only the engine's block
	// size" (no matching while it is unknown).
	BlockSizeTokens int `json:"blockSizeTokens"`
	// BlockSize is GIE v1.3's block size in characters. Deprecated and
	// ignored: use blockSizeTokens.
	BlockSize int `json:"blockSize,omitempty"`
	// HashBlockSize is GIE v1.0's block size in characters. Deprecated and
	// ignored: use blockSizeTokens.
	HashBlockSize int `json:"hashBlockSize,omitempty"`
	// MaxPrefixBlocksToMatch caps the number of leading blocks hashed and
	// matched; longer prompts are truncated. In [0, MaxPrefixBlocks].
	// Default 256. Must be > 0 unless maxPrefixTokensToMatch is set.
	MaxPrefixBlocksToMatch int `json:"maxPrefixBlocksToMatch"`
	// MaxPrefixTokensToMatch, when > 0, replaces maxPrefixBlocksToMatch by
	// maxPrefixTokensToMatch / block size. In [0, MaxPrefixTokens]. Default
	// 0.
	MaxPrefixTokensToMatch int `json:"maxPrefixTokensToMatch"`
	// LRUCapacityPerServer is the number of block hashes remembered per
	// endpoint when autoTune is off or the endpoint does not report its
	// number of KV cache blocks. In [1, MaxLRUCapacityPerServer]. Default
	// 31250 (about 500k tokens of 16-token blocks).
	LRUCapacityPerServer int `json:"lruCapacityPerServer"`
}

// DefaultParams returns GIE v1.5's defaults.
func DefaultParams() Params {
	return Params{
		AutoTune:               true,
		BlockSizeTokens:        16,
		MaxPrefixBlocksToMatch: 256,
		MaxPrefixTokensToMatch: 0,
		LRUCapacityPerServer:   31250,
	}
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	switch {
	case p.BlockSizeTokens < 0:
		errs = append(errs, fmt.Errorf("blockSizeTokens: must be >= 0, got %d", p.BlockSizeTokens))
	case p.BlockSizeTokens > MaxBlockSizeTokens:
		errs = append(errs, fmt.Errorf("blockSizeTokens: must be <= %d, got %d", MaxBlockSizeTokens, p.BlockSizeTokens))
	case p.BlockSizeTokens == 0 && !p.AutoTune:
		errs = append(errs, fmt.Errorf("blockSizeTokens: must be > 0 when autoTune is false, got %d", p.BlockSizeTokens))
	}
	for _, dep := range []struct {
		key string
		v   int
	}{{"blockSize", p.BlockSize}, {"hashBlockSize", p.HashBlockSize}} {
		switch {
		case dep.v < 0:
			errs = append(errs, fmt.Errorf("%s: must be >= 0, got %d", dep.key, dep.v))
		case dep.v > 0 && p.BlockSizeTokens <= 0:
			errs = append(errs, fmt.Errorf("%s: deprecated block size in characters (%d) is not converted; set blockSizeTokens > 0 instead", dep.key, dep.v))
		}
	}
	switch {
	case p.MaxPrefixBlocksToMatch < 0:
		errs = append(errs, fmt.Errorf("maxPrefixBlocksToMatch: must be >= 0, got %d", p.MaxPrefixBlocksToMatch))
	case p.MaxPrefixBlocksToMatch > MaxPrefixBlocks:
		errs = append(errs, fmt.Errorf("maxPrefixBlocksToMatch: must be <= %d, got %d", MaxPrefixBlocks, p.MaxPrefixBlocksToMatch))
	case p.MaxPrefixBlocksToMatch == 0 && p.MaxPrefixTokensToMatch <= 0:
		errs = append(errs, fmt.Errorf("maxPrefixBlocksToMatch: must be > 0 unless maxPrefixTokensToMatch is set, got %d", p.MaxPrefixBlocksToMatch))
	}
	switch {
	case p.MaxPrefixTokensToMatch < 0:
		errs = append(errs, fmt.Errorf("maxPrefixTokensToMatch: must be >= 0, got %d", p.MaxPrefixTokensToMatch))
	case p.MaxPrefixTokensToMatch > MaxPrefixTokens:
		errs = append(errs, fmt.Errorf("maxPrefixTokensToMatch: must be <= %d, got %d", MaxPrefixTokens, p.MaxPrefixTokensToMatch))
	}
	switch {
	case p.LRUCapacityPerServer <= 0:
		errs = append(errs, fmt.Errorf("lruCapacityPerServer: must be > 0, got %d", p.LRUCapacityPerServer))
	case p.LRUCapacityPerServer > MaxLRUCapacityPerServer:
		errs = append(errs, fmt.Errorf("lruCapacityPerServer: must be <= %d, got %d", MaxLRUCapacityPerServer, p.LRUCapacityPerServer))
	}
	return errors.Join(errs...)
}

// deprecatedKeys lists the deprecated keys that are set, for a start-up log.
func (p *Params) deprecatedKeys() []string {
	var out []string
	if p.BlockSize != 0 {
		out = append(out, "blockSize")
	}
	if p.HashBlockSize != 0 {
		out = append(out, "hashBlockSize")
	}
	return out
}

// blockSizeFor returns the block size in tokens for a request with these
// candidates: with autoTune the first candidate's KV-cache block size when
// known (a reported size above MaxBlockSizeTokens counts as unknown), else
// blockSizeTokens.
func (p *Params) blockSizeFor(candidates []*scheduling.Endpoint) int {
	if p.AutoTune && len(candidates) > 0 {
		if bs := candidates[0].Metrics().CacheBlockSize; bs > 0 && bs <= MaxBlockSizeTokens {
			return bs
		}
	}
	return p.BlockSizeTokens
}

// maxBlocksFor returns how many leading blocks to match for a block size.
func (p *Params) maxBlocksFor(blockSize int) int {
	if p.MaxPrefixTokensToMatch > 0 && blockSize > 0 {
		return p.MaxPrefixTokensToMatch / blockSize
	}
	return p.MaxPrefixBlocksToMatch
}

// capacityFor returns the index capacity of an endpoint: with autoTune its
// number of KV cache blocks when known (at most MaxLRUCapacityPerServer),
// else lruCapacityPerServer.
func (p *Params) capacityFor(e *scheduling.Endpoint) int {
	if p.AutoTune {
		if n := e.Metrics().CacheNumBlocks; n > 0 {
			return min(n, MaxLRUCapacityPerServer)
		}
	}
	return p.LRUCapacityPerServer
}

// ProducerRegistration registers approx-prefix-cache-producer.
var ProducerRegistration = scheduling.Registration{
	Type:      ProducerType,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, NewProducer),
}

// ScorerRegistration registers prefix-cache-scorer.
var ScorerRegistration = scheduling.Registration{
	Type:      ScorerType,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, NewScorer),
}

// Interface guards.
var (
	_ scheduling.DataProducer    = (*Producer)(nil)
	_ scheduling.PreRequest      = (*Producer)(nil)
	_ scheduling.Closer          = (*Producer)(nil)
	_ scheduling.Scorer          = (*Scorer)(nil)
	_ scheduling.DataConsumer    = (*Scorer)(nil)
	_ scheduling.DefaultProducer = (*Scorer)(nil)
)
