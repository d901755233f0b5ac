package gateway

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
)

// DefaultStreamsPerConnection is how many ext_proc streams the gateway opens
// on one gRPC connection to the EPP before it dials another. An HTTP/2 server
// caps the streams of a connection (SETTINGS_MAX_CONCURRENT_STREAMS: 1000 for
// Switchyard's ext_proc server, 100-250 for many servers) and grpc-go makes a
// stream past that cap wait for a free slot instead of opening a connection,
// whereas Envoy's HTTP/2 pool opens another connection. 100 stays under the
// caps servers commonly advertise.
const DefaultStreamsPerConnection = 100

// errPoolClosed is returned by acquire after Close.
var errPoolClosed = errors.New("gateway closed")

// eppConn is one gRPC connection to the EPP and its open ext_proc streams.
type eppConn struct {
	cc      *grpc.ClientConn
	client  extprocv3.ExternalProcessorClient
	streams atomic.Int64
}

// tryAcquire takes a stream slot when fewer than limit are taken.
func (c *eppConn) tryAcquire(limit int64) bool {
	for {
		n := c.streams.Load()
		if n >= limit {
			return false
		}
		if c.streams.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// connPool holds the gateway's gRPC connections to the EPP, as Envoy's
// HTTP/2 connection pool does for the ext_proc cluster: a stream goes on the
// first connection with a free slot, and a new connection is dialed (lazily;
// grpc.NewClient does not connect until the first stream) when all are full.
// Taking a slot reads an immutable slice and CASes a counter; only dialing
// takes the mutex. Connections stay open until close: their number is
// bounded by ⌈MaxConcurrentRequests / StreamsPerConnection⌉.
type connPool struct {
	limit int64
	dial  func() (*grpc.ClientConn, error)
	onNew func(total int) // called under mu after a dial (logs, metrics)

	conns atomic.Pointer[[]*eppConn] // copy-on-write, appended under mu

	mu     sync.Mutex
	closed bool
}

func newConnPool(limit int, dial func() (*grpc.ClientConn, error), onNew func(int)) (*connPool, error) {
	p := &connPool{limit: int64(limit), dial: dial, onNew: onNew}
	// The first connection is created at once so that a bad address fails New.
	cc, err := dial()
	if err != nil {
		return nil, err
	}
	first := []*eppConn{{cc: cc, client: extprocv3.NewExternalProcessorClient(cc)}}
	p.conns.Store(&first)
	return p, nil
}

// acquire returns a connection with a stream slot taken; the caller calls
// release(c) once the stream is over.
func (p *connPool) acquire() (*eppConn, error) {
	if c := p.scan(*p.conns.Load()); c != nil {
		return c, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPoolClosed
	}
	cur := *p.conns.Load()
	if c := p.scan(cur); c != nil { // another request dialed, or a slot freed
		return c, nil
	}
	cc, err := p.dial()
	if err != nil {
		return nil, fmt.Errorf("dial another EPP connection: %w", err)
	}
	c := &eppConn{cc: cc, client: extprocv3.NewExternalProcessorClient(cc)}
	c.streams.Store(1)
	next := make([]*eppConn, len(cur)+1)
	copy(next, cur)
	next[len(cur)] = c
	p.conns.Store(&next)
	if p.onNew != nil {
		p.onNew(len(next))
	}
	return c, nil
}

func (p *connPool) scan(conns []*eppConn) *eppConn {
	for _, c := range conns {
		if c.tryAcquire(p.limit) {
			return c
		}
	}
	return nil
}

func (p *connPool) release(c *eppConn) { c.streams.Add(-1) }

// size is the number of connections (tests).
func (p *connPool) size() int { return len(*p.conns.Load()) }

// close closes every connection (streams on them fail) and returns how many
// it closed: 0 when the pool was closed already.
func (p *connPool) close() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, nil
	}
	p.closed = true
	conns := *p.conns.Load()
	var errs []error
	for _, c := range conns {
		if err := c.cc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return len(conns), errors.Join(errs...)
}
