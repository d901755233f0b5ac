package prefix

import (
	"math/rand/v2"
	"testing"
)

// TestTableAgainstMap runs random puts and deletes against a Go map,
// including clustered keys that share a home slot, and checks every key
// after each step.
func TestTableAgainstMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func(r *rand.Rand) uint64
	}{
		{name: "uniform", key: func(r *rand.Rand) uint64 { return r.Uint64() % 4096 * 0x9E3779B97F4A7C15 }},
		{name: "small keys", key: func(r *rand.Rand) uint64 { return r.Uint64()%300 + 1 }}, // 0 would alias 1
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tb table[int]
			ref := map[uint64]int{}
			r := rand.New(rand.NewPCG(1, 2))
			for step := range 20000 {
				k := tc.key(r)
				if r.IntN(3) == 0 {
					_, had := ref[k]
					delete(ref, k)
					if got := tb.del(k); got != had {
						t.Fatalf("step %d: del(%d) = %v, want %v", step, k, got, had)
					}
				} else {
					ref[k] = step
					tb.put(k, step)
				}
				if tb.len() != len(ref) {
					t.Fatalf("step %d: len = %d, want %d", step, tb.len(), len(ref))
				}
				if step%97 == 0 {
					for k, v := range ref {
						if got, ok := tb.get(k); !ok || got != v {
							t.Fatalf("step %d: get(%d) = %d, %v; want %d", step, k, got, ok, v)
						}
					}
					n := 0
					for range tb.all {
						n++
					}
					if n != len(ref) {
						t.Fatalf("step %d: all yields %d entries, want %d", step, n, len(ref))
					}
				}
			}
		})
	}
	t.Run("zero key and empty table", func(t *testing.T) {
		var tb table[string]
		if _, ok := tb.get(0); ok || tb.del(0) {
			t.Error("empty table found key 0")
		}
		tb.put(0, "zero")
		if v, ok := tb.get(0); !ok || v != "zero" {
			t.Errorf("get(0) = %q, %v", v, ok)
		}
		if !tb.del(0) || tb.len() != 0 {
			t.Error("del(0) failed")
		}
		for range tb.all {
			t.Error("all yielded from an empty table")
		}
	})
}
