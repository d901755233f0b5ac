// Package grpcpool is the buffer pool Switchyard's gRPC servers read and
// marshal messages with.
//
// gRPC's default pool (google.golang.org/grpc/mem) has tiers of 256 B,
// 4 KiB, 16 KiB, 32 KiB and 1 MiB, and zeroes a buffer's whole capacity
// when it hands it out. An ext_proc body chunk of 32 KiB is a little over
// 32 KiB with its framing, so each one cost a 1 MiB clear when received and
// another when echoed back: about 14 MiB of clearing for a 200 KB prompt,
// the largest item of the request path's CPU profile. Pool has a tier for
// every power of two from 256 B to 1 MiB, so a buffer is at most twice its
// message.
//
// Who may import it: cmd/epp, which makes Pool gRPC's default at init
// (experimental.SetDefaultBufferPool: the proto codec uses no other),
// pkg/server, which gives it to the ext_proc server, and the benchmarks'
// null EPP, so that the protocol floor is measured with the same buffers.
// It starts no goroutines.
package grpcpool
