package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestConnPoolSlots: acquire fills a connection up to the limit before it
// dials the next one, a released slot is reused before any dial, and
// concurrent acquirers never put more than limit streams on a connection.
func TestConnPoolSlots(t *testing.T) {
	dials := 0
	dial := func() (*grpc.ClientConn, error) {
		dials++ // under the pool's mutex (or in newConnPool)
		return grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	var grown []int
	p, err := newConnPool(3, dial, func(n int) { grown = append(grown, n) })
	if err != nil {
		t.Fatal(err)
	}
	var held []*eppConn
	for range 7 {
		c, err := p.acquire()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if p.size() != 3 || dials != 3 || len(grown) != 2 || grown[1] != 3 {
		t.Fatalf("7 streams at 3 per connection: %d connections, %d dials, grown %v; want 3, 3, [2 3]", p.size(), dials, grown)
	}
	if held[0] != held[2] || held[2] == held[3] || held[6] == held[5] {
		t.Error("streams were not packed onto the first connection with a free slot")
	}
	p.release(held[1])
	if c, _ := p.acquire(); c != held[0] || dials != 3 {
		t.Errorf("a freed slot on connection 0 was not reused (dials %d)", dials)
	}

	// Release everything, then hammer: the counts must stay within limit.
	p.release(held[0])
	for _, c := range held[1:] {
		p.release(c)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	over := 0
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				c, err := p.acquire()
				if err != nil {
					t.Error(err)
					return
				}
				if c.streams.Load() > 3 {
					mu.Lock()
					over++
					mu.Unlock()
				}
				p.release(c)
			}
		}()
	}
	wg.Wait()
	if over > 0 {
		t.Errorf("%d acquisitions saw more than 3 streams on a connection", over)
	}
	for i, c := range *p.conns.Load() {
		if n := c.streams.Load(); n != 0 {
			t.Errorf("connection %d holds %d streams after every release", i, n)
		}
	}
	if p.size() > 6 { // 16 holders at most at once: ceil(16/3) connections
		t.Errorf("%d connections for at most 16 concurrent streams", p.size())
	}

	// Closed: a full pool dials no more, and a second close is a no-op.
	for range 3 * p.size() {
		if _, err := p.acquire(); err != nil {
			t.Fatal(err)
		}
	}
	size := p.size()
	if n, err := p.close(); n != size || err != nil {
		t.Errorf("close: %d, %v; want %d, nil", n, err, size)
	}
	if n, _ := p.close(); n != 0 {
		t.Errorf("second close closed %d connections, want 0", n)
	}
	if _, err := p.acquire(); !errors.Is(err, errPoolClosed) || p.size() != size {
		t.Errorf("acquire on a full closed pool: %v, %d connections; want errPoolClosed, %d", err, p.size(), size)
	}
}

// TestStreamsPastServerCapOpenAnotherConnection: an EPP that advertises
// MAX_CONCURRENT_STREAMS 2 still gets five concurrent requests routed at
// once, because the gateway spreads them over three connections, as Envoy's
// HTTP/2 pool does. With a per-connection budget above the server's cap the
// third stream waits on the first connection instead, which is what the
// budget is for.
func TestStreamsPastServerCapOpenAnotherConnection(t *testing.T) {
	const n = 5
	for _, tc := range []struct {
		name      string
		perConn   int
		wantHits  int
		wantConns int
	}{
		{"budget at the cap", 2, n, 3},
		{"budget above the cap", 10, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			arrived := make(chan struct{}, n)
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				_, _ = io.WriteString(w, "ok")
			})
			epp := startFakeEPP(t, fakeConfig{dest: up.hostPort()}, grpc.MaxConcurrentStreams(2))
			reg := prometheus.NewRegistry()
			gw, err := New(Options{EPPAddr: epp.addr, StreamsPerConnection: tc.perConn, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			srv := newTestServer(t, gw)

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			codes := make(chan int, n)
			for range n {
				go func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"p"}`))
					resp, err := srv.Client().Do(req)
					if err != nil {
						codes <- 0
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					codes <- resp.StatusCode
				}()
			}
			hits := 0
			deadline := time.After(10 * time.Second)
		wait:
			for hits < tc.wantHits {
				select {
				case <-arrived:
					hits++
				case <-deadline:
					break wait
				}
			}
			if tc.wantHits < n { // a stream that could open would arrive within this
				select {
				case <-arrived:
					hits++
				case <-time.After(time.Second):
				}
			}
			if hits != tc.wantHits {
				t.Errorf("%d of %d requests reached the upstream while all were held, want %d", hits, n, tc.wantHits)
			}
			if got := gw.conns.size(); got != tc.wantConns {
				t.Errorf("%d EPP connections, want %d", got, tc.wantConns)
			}
			if got := gaugeValue(t, gw.metrics.eppConns); got != float64(tc.wantConns) {
				t.Errorf("switchyard_gateway_epp_connections = %v, want %d", got, tc.wantConns)
			}
			close(release)
			for range n {
				if c := <-codes; c != http.StatusOK {
					t.Errorf("status %d, want 200", c)
				}
			}
			srv.Close()
			_ = gw.Close()
			if got := gaugeValue(t, gw.metrics.eppConns); got != 0 {
				t.Errorf("switchyard_gateway_epp_connections = %v after Close, want 0", got)
			}
		})
	}
}
