package grpcpool

import (
	"testing"

	"google.golang.org/grpc/mem"
)

// TestTiers: a buffer is at most twice the size asked for, up to 1 MiB,
// and comes back zeroed after a dirty Put.
func TestTiers(t *testing.T) {
	for _, n := range []int{1, 255, 256, 257, 4 << 10, 32<<10 + 10, 100 << 10, 200 << 10, 1 << 20} {
		b := Pool.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d): len %d", n, len(*b))
		}
		if c := cap(*b); c > max(2*n, 256) {
			t.Errorf("Get(%d): cap %d, more than twice the size", n, c)
		}
		for i := range *b {
			(*b)[i] = 0xff
		}
		Pool.Put(b)
		b = Pool.Get(n)
		for i, v := range (*b)[:cap(*b)] {
			if v != 0 {
				t.Fatalf("Get(%d) after a dirty Put: byte %d is %#x", n, i, v)
			}
		}
		Pool.Put(b)
	}
}

// BenchmarkGet32KiBChunk compares, side by side, the buffer of a 32 KiB
// body chunk with its framing from gRPC's default pool and from Pool.
func BenchmarkGet32KiBChunk(b *testing.B) {
	const n = 32<<10 + 12
	for _, c := range []struct {
		name string
		pool mem.BufferPool
	}{{"grpc-default", mem.DefaultBufferPool()}, {"grpcpool", Pool}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf := c.pool.Get(n)
				c.pool.Put(buf)
			}
		})
	}
}
