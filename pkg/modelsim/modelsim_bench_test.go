package modelsim

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkRoundTrip measures one request through Handler with TimeScale 0
// (the engine never sleeps): parsing, hashing, admission, 16 engine steps,
// and the response.
func BenchmarkRoundTrip(b *testing.B) {
	prompt := strings.Repeat("You are a helpful assistant. Answer briefly. ", 10)
	for _, bc := range []struct {
		name, path, body string
	}{
		{"completion", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":16}`, prompt)},
		{"completion-stream", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`, prompt)},
		{"chat", "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":16}`, prompt)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.TimeScale = 0
			s, err := New(cfg, WithID("bench"))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := s.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			h := s.Handler()
			body := []byte(bc.body)
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, bc.path, bytes.NewReader(body))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkMetricsRender scrapes /metrics while 64 sequences run.
func BenchmarkMetricsRender(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MaxRunning = 64
	cfg.MaxBatchedTokens = 0
	cfg.LoRAs = []string{"a", "b"}
	cfg.MaxLoRAs = 2
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := range 64 {
		lora := []string{"", "a", "b"}[i%3]
		hashes := appendBlockHashes(nil, rootHash(0, lora), text(fmt.Sprint(i), 512), cfg.BlockSize)
		if err := s.eng.submit(newSeq(lora, 128, 100, finishLength, hashes)); err != nil {
			b.Fatal(err)
		}
	}
	s.eng.step()
	if st := s.Stats(); st.Running != 64 {
		b.Fatalf("%d running", st.Running)
	}
	h := s.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkPrefixLookup hashes a 4 KB prompt into 64 chained block hashes
// and looks them up in a cache that holds them all.
func BenchmarkPrefixLookup(b *testing.B) {
	cfg := DefaultConfig()
	c := newKVCache(cfg.KVBlocks)
	prompt := text("4k", 4096)
	root := rootHash(0, "")
	hashes := appendBlockHashes(nil, root, prompt, cfg.BlockSize)
	var held []*block
	for _, h := range hashes {
		held = append(held, c.pin(h))
	}
	c.release(held)
	b.Run("hash+lookup", func(b *testing.B) {
		buf := make([]uint64, 0, 64)
		b.ReportAllocs()
		b.SetBytes(int64(len(prompt)))
		for b.Loop() {
			buf = appendBlockHashes(buf[:0], root, prompt, cfg.BlockSize)
			if hits, _ := c.lookup(buf, len(buf)); hits != 64 {
				b.Fatal(hits)
			}
		}
	})
	b.Run("lookup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if hits, _ := c.lookup(hashes, len(hashes)); hits != 64 {
				b.Fatal(hits)
			}
		}
	})
}
