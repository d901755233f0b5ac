package flowcontrol_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

// model is what the property test knows about one item.
type model struct {
	it      *flowcontrol.Item
	status  string // queued, dispatched, cancelled, expired, rejected
	ttl     time.Duration
	enqueue time.Time
}

// TestDispatcherProperties drives a controller with random operations
// (enqueue, cancel, time passing with TTL expiry, dispatch with and
// without room) from fixed seeds, and checks after every step:
//   - no item is dispatched twice, and only a queued item leaves;
//   - no item is lost: at the end every admitted item has exactly one of
//     dispatched, expired or cancelled, and a refusal happens exactly when
//     the limits say the item does not fit;
//   - a dispatch always comes from the highest band with work (a higher
//     band is never starved by a lower one);
//   - in a global-strict band the oldest item leaves first; in a
//     round-robin band a flow is never served twice while another flow
//     stayed active all that time without being served;
//   - nothing leaves while the pool is saturated, and TTLs expire no
//     earlier than they should.
func TestDispatcherProperties(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { dispatcherRun(t, seed, 1500) })
	}
}

func dispatcherRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	clk := testingclock.NewFakeClock(t0)
	const (
		maxReq   = 40
		maxBytes = 900
		band3Max = 12
	)
	rr := flowcontrol.RoundRobin{}
	cfg := flowcontrol.Config{
		MaxRequests:          maxReq,
		MaxBytes:             maxBytes,
		Clock:                clk,
		DefaultRequestTTL:    8 * time.Second,
		NoEndpointRequestTTL: 8 * time.Second,
		Bands:                []flowcontrol.BandConfig{{Priority: 3, MaxRequests: band3Max, Fairness: rr}},
		DefaultNegativeBand:  &flowcontrol.BandConfig{Fairness: rr},
	}
	c, err := flowcontrol.NewStarted(cfg, roomy)
	require.NoError(t, err)

	priorities := []int{3, 0, -1}
	isRR := map[int]bool{3: true, -1: true}
	flows := []string{"f0", "f1", "f2", "f3", "f4"}
	var all []*model
	queued := map[*flowcontrol.Item]*model{}
	var qBytes uint64
	bandCount := map[int]int{}
	// Round-robin bookkeeping per flow key.
	activeSince := map[flowcontrol.FlowKey]int{}
	lastServed := map[flowcontrol.FlowKey]int{}
	flowLen := map[flowcontrol.FlowKey]int{}

	leave := func(m *model, status string, step int) {
		require.Equal(t, "queued", m.status, "%s left twice (%s, then %s)", m.it.RequestID, m.status, status)
		m.status = status
		delete(queued, m.it)
		qBytes -= m.it.Bytes
		bandCount[m.it.Flow.Priority]--
		k := m.it.Flow
		flowLen[k]--
		if flowLen[k] == 0 {
			delete(activeSince, k)
		}
		require.False(t, m.it.Queued())
	}

	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 40: // enqueue
			p := priorities[rng.IntN(len(priorities))]
			it := &flowcontrol.Item{RequestID: fmt.Sprint("r", step), Flow: flowcontrol.FlowKey{ID: flows[rng.IntN(len(flows))], Priority: p}, Bytes: uint64(1 + rng.IntN(60))}
			var ttl time.Duration
			if rng.IntN(3) == 0 {
				ttl = time.Duration(1+rng.IntN(20)) * time.Second
			}
			fits := len(queued) < maxReq && qBytes+it.Bytes <= maxBytes && (p != 3 || bandCount[3] < band3Max) &&
				it.Bytes <= 1_000_000_000
			o, ok := c.Admit(it, clk.Now(), ttl)
			m := &model{it: it, ttl: ttl, enqueue: clk.Now()}
			if ttl == 0 {
				m.ttl = cfg.DefaultRequestTTL
			}
			all = append(all, m)
			require.Equal(t, fits, ok, "admission of %s: %v", it.RequestID, o)
			if !ok {
				require.Equal(t, flowcontrol.RejectedQueueFull, o)
				m.status = "rejected"
				continue
			}
			m.status = "queued"
			queued[it] = m
			qBytes += it.Bytes
			bandCount[p]++
			if flowLen[it.Flow] == 0 {
				activeSince[it.Flow] = step
			}
			flowLen[it.Flow]++
		case r < 50: // a client leaves
			for it, m := range queued {
				require.Equal(t, flowcontrol.Cancelled, c.Cancel(it))
				leave(m, "cancelled", step)
				break
			}
		case r < 65: // time passes; every waiter's timer fires
			clk.Step(time.Duration(rng.IntN(3000)) * time.Millisecond)
			for it, m := range queued {
				o, next := c.Expire(it)
				waited := clk.Since(m.enqueue)
				if next == 0 {
					require.Equal(t, flowcontrol.ExpiredTTL, o)
					require.GreaterOrEqual(t, waited, m.ttl, "%s expired early", it.RequestID)
					leave(m, "expired", step)
				} else {
					require.Less(t, waited, m.ttl, "%s outlived its TTL", it.RequestID)
				}
			}
		default: // a dispatch attempt
			if rng.IntN(4) == 0 {
				require.Nil(t, c.DispatchOne(1.0+rng.Float64(), 1), "dispatched while saturated")
				continue
			}
			it := c.DispatchOne(rng.Float64()*0.99, 1)
			if len(queued) == 0 {
				require.Nil(t, it)
				continue
			}
			require.NotNil(t, it, "work queued and room, but nothing dispatched")
			m, ok := queued[it]
			require.True(t, ok, "%s dispatched but not queued", it.RequestID)
			p := it.Flow.Priority
			for _, q := range priorities {
				if q > p {
					require.Zero(t, bandCount[q], "band %d starved by band %d", q, p)
				}
			}
			if isRR[p] {
				if last, served := lastServed[it.Flow]; served {
					for k, since := range activeSince {
						if k.Priority == p && k != it.Flow && since < last {
							require.Greater(t, lastServed[k], last, "round-robin: %v served twice while %v waited", it.Flow, k)
						}
					}
				}
				lastServed[it.Flow] = step
			} else {
				for q, qm := range queued {
					if q.Flow.Priority == p {
						require.LessOrEqual(t, it.Seq(), q.Seq(), "global-strict: %s left before older %s", it.RequestID, qm.it.RequestID)
					}
				}
			}
			leave(m, "dispatched", step)
		}
		s := c.Stats()
		require.Equal(t, uint64(len(queued)), s.Requests)
		require.Equal(t, qBytes, s.Bytes)
	}
	for it := c.DispatchOne(0, 1); it != nil; it = c.DispatchOne(0, 1) {
		leave(queued[it], "dispatched", steps)
	}
	require.Empty(t, queued, "items lost in the queues")
	counts := map[string]int{}
	for _, m := range all {
		require.NotEqual(t, "queued", m.status)
		counts[m.status]++
	}
	require.Positive(t, counts["dispatched"])
	require.Positive(t, counts["rejected"]+counts["expired"]+counts["cancelled"])
}

// TestRoundRobinShares: two tenants, one queueing ten times as much as the
// other, get equal dispatch shares (within one) while both have work.
func TestRoundRobinShares(t *testing.T) {
	c := started(t, flowcontrol.Config{DefaultBand: flowcontrol.BandConfig{Fairness: flowcontrol.RoundRobin{}}})
	for i := range 500 {
		admit(t, c, item(fmt.Sprint("heavy", i), "heavy", 0), t0, 0)
		if i%10 == 0 {
			admit(t, c, item(fmt.Sprint("light", i), "light", 0), t0, 0)
		}
	}
	served := map[string]int{}
	for it := c.DispatchOne(0, 1); it != nil && served["light"] < 50; it = c.DispatchOne(0, 1) {
		served[it.Flow.ID]++
		require.LessOrEqual(t, served["heavy"]-served["light"], 1)
	}
	require.Equal(t, 50, served["light"])
}
