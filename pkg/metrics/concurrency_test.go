package metrics

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestConcurrentUse hammers every method from many goroutines (run with
// -race) and checks that no increment is lost.
func TestConcurrentUse(t *testing.T) {
	m, reg := newTest(t)
	const workers, perWorker = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				model := fmt.Sprintf("m%d", i%4)
				m.RequestReceived(model, "t", i%3)
				m.RequestError(model, "t", ErrorCodeInternal)
				m.RequestSize(model, "t", i)
				m.ResponseSize(model, "t", i)
				m.RequestDuration(model, "t", time.Millisecond)
				m.Tokens(model, "t", 1, 1, 0)
				m.NormalizedTPOT(model, "t", time.Millisecond, 2)
				m.TTFT(model, "t", time.Millisecond)
				m.RunningRequests(model, 1)
				m.RunningRequests(model, -1)
				m.SchedulerE2E(time.Microsecond)
				m.SchedulerAttempt(i%2 == 0, "t", fmt.Sprintf("pod-%d", w), "ns", 8000)
				m.Refusal("saturated")
				if i%50 == 0 {
					m.UpdatePool([]PoolSample{{Name: "a", Ready: true, Queue: w}})
					m.ConfigReload(true)
					m.SetInfo("c", "r")
					m.BufferBudget(int64(w), func() int64 { return int64(i) })
					_, _ = reg.Gather()
				}
			}
		})
	}
	wg.Wait()
	f := gather(t, reg)
	var total float64
	for _, s := range f[NameRequestTotal].GetMetric() {
		total += s.GetCounter().GetValue()
	}
	assert.Equal(t, float64(workers*perWorker), total)
	for _, s := range f[NameRunningRequests].GetMetric() {
		assert.Equal(t, 0.0, s.GetGauge().GetValue())
	}
	assert.Equal(t, float64(workers*perWorker), counterValue(t, f[NameRefusals], map[string]string{"reason": "saturated"}))
	var hist uint64
	for _, s := range f[NameRequestDuration].GetMetric() {
		hist += s.GetHistogram().GetSampleCount()
	}
	assert.Equal(t, uint64(workers*perWorker), hist)
}
