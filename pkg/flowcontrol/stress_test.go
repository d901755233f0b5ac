package flowcontrol_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

// TestConcurrentEnqueue runs the real dispatcher against concurrent
// callers that cancel some requests while the pool flips between saturated
// and free: every call returns, the outcomes add up, and the queues end
// empty (run with -race).
func TestConcurrentEnqueue(t *testing.T) {
	pool := newSwitchPool(1.0)
	c, err := flowcontrol.New(flowcontrol.Config{MaxRequests: 50, DefaultRequestTTL: 200 * time.Millisecond,
		DefaultBand: flowcontrol.BandConfig{Fairness: flowcontrol.RoundRobin{}}, Bands: []flowcontrol.BandConfig{{Priority: 5}}}, pool)
	require.NoError(t, err)
	running(t, c)
	stop := make(chan struct{})
	var flipper sync.WaitGroup
	flipper.Add(1)
	go func() {
		defer flipper.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(rng.IntN(2000)) * time.Microsecond):
			}
			pool.sat.Store(float64(rng.IntN(2)))
			c.Notify()
		}
	}()
	const callers, each = 8, 150
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range each {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(5) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(500))*time.Microsecond, cancel)
				}
				prio := []int{0, 5, -1}[rng.IntN(3)]
				c.Enqueue(ctx, &flowcontrol.Item{RequestID: fmt.Sprint(g, "-", i), Flow: flowcontrol.FlowKey{ID: fmt.Sprint("t", rng.IntN(4)), Priority: prio}, Bytes: 100})
				cancel()
			}
		}()
	}
	wg.Wait()
	close(stop)
	flipper.Wait()
	s := c.Stats()
	require.Zero(t, s.Requests)
	require.Zero(t, s.Bytes)
	var total uint64
	for _, n := range s.Outcomes {
		total += n
	}
	require.Equal(t, uint64(callers*each), total)
	require.Positive(t, s.Outcomes[flowcontrol.Dispatched])
}
