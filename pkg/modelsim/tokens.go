package modelsim

import (
	"strings"

	"github.com/cespare/xxhash/v2"
)

// bytesPerToken is the simulated tokenizer: every 4 bytes of prompt material
// are one token (rounded up). It is close to real BPE tokenizers on English
// text, costs nothing, and matches the character-based estimates endpoint
// pickers use, so the picker's idea of a prompt's size agrees with ours.
const bytesPerToken = 4

// countTokens returns the number of simulated tokens of n bytes of prompt
// material; every prompt has at least one token.
func countTokens(n int) int {
	t := (n + bytesPerToken - 1) / bytesPerToken
	return max(t, 1)
}

// rootHash is the parent hash of a prompt's first block. Requests for
// different LoRA adapters never share cache blocks, as in vLLM, where the
// adapter is part of the block hash.
func rootHash(seed uint64, lora string) uint64 {
	return splitmix64(seed ^ xxhash.Sum64String(lora))
}

// appendBlockHashes appends the chained hashes of every full block of the
// material: block i covers bytes [i×B, (i+1)×B) with B = blockSize×4, and its
// hash mixes the hash of block i−1 with the xxhash of its content, so one
// hash identifies the whole prefix up to and including its block. A trailing
// partial block has no hash and is never shared.
func appendBlockHashes(dst []uint64, root uint64, material string, blockSize int) []uint64 {
	span := blockSize * bytesPerToken
	parent := root
	for off := 0; off+span <= len(material); off += span {
		parent = splitmix64(parent ^ xxhash.Sum64String(material[off:off+span]))
		dst = append(dst, parent)
	}
	return dst
}

// splitmix64 is a fast, well-mixed 64-bit hash used for deterministic
// choices (filler words, ids, injected errors).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fillerWords are the simulated vocabulary of generated text: one word is
// one output token. All are plain lower-case ASCII, so they need no JSON
// escaping.
var fillerWords = [...]string{
	"the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
	"not", "this", "are", "or", "from", "at", "which", "but", "have", "an", "they", "you", "were", "one", "all", "we",
	"can", "has", "there", "been", "if", "more", "when", "will", "would", "so", "no", "model", "token", "cache",
	"server", "request", "simulated", "response", "batch", "prefix", "queue", "block", "decode", "prefill", "latency", "gateway",
	"endpoint", "picker", "memory", "kernel", "tensor", "layer",
}

// outputWord returns output token i of a request whose text key is key.
func outputWord(key uint64, i int) string {
	return fillerWords[splitmix64(key+uint64(i))%uint64(len(fillerWords))]
}

// outputText returns the full text of n output tokens.
func outputText(key uint64, n int) string {
	var b strings.Builder
	b.Grow(n * 7)
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(outputWord(key, i))
	}
	return b.String()
}
