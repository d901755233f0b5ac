package grpcpool

import "google.golang.org/grpc/mem"

// Smallest and largest tier, as powers of two.
const (
	minTierExp = 8  // 256 B
	maxTierExp = 20 // 1 MiB; larger buffers come from a fallback pool, as in gRPC's default
)

// Pool is a tiered buffer pool with a tier per power of two from 256 B to
// 1 MiB. It zeroes buffers on Get, as gRPC's default does.
var Pool = newPool()

func newPool() mem.BufferPool {
	exps := make([]uint8, 0, maxTierExp-minTierExp+1)
	for e := uint8(minTierExp); e <= maxTierExp; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		panic("grpcpool: " + err.Error()) // the exponents are constants
	}
	return p
}
