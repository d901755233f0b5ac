package metrics

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFlowMetricsLabelSets pins the closed label sets of the flow-control
// metrics: the outcome label takes only GIE's six names (anything else is
// RejectedOther), fairness ids beyond MaxFairnessLabelValues and
// priorities beyond MaxPriorityLabelValues share "other", and paired
// FlowWaiting calls leave the gauges balanced.
func TestFlowMetricsLabelSets(t *testing.T) {
	m, reg := newTest(t)
	for _, o := range append(slices.Clone(FlowOutcomes), "Bogus", "") {
		m.FlowWaiting("a", 0, "m", "t", 10, 1)
		m.FlowDone("a", 0, "m", "t", o, time.Microsecond, time.Millisecond)
		m.FlowWaiting("a", 0, "m", "t", 10, -1)
	}
	f := gather(t, reg)
	var outcomes []string
	for _, s := range f[NameFlowQueueDuration].GetMetric() {
		outcomes = append(outcomes, label(s, "outcome"))
	}
	slices.Sort(outcomes)
	want := slices.Clone(FlowOutcomes)
	slices.Sort(want)
	assert.Equal(t, want, outcomes)
	rejectedOther := find(t, f[NameFlowQueueDuration], map[string]string{"outcome": "RejectedOther"})
	assert.Equal(t, uint64(3), rejectedOther.GetHistogram().GetSampleCount(), "unknown outcomes count as RejectedOther")
	size := find(t, f[NameFlowQueueSize], map[string]string{"fairness_id": "a", "priority": "0", "inference_pool": "pool-a", "model_name": "m", "target_model_name": "t"})
	assert.Zero(t, size.GetGauge().GetValue(), "balanced")

	for i := range MaxFairnessLabelValues + 50 {
		m.FlowWaiting(fmt.Sprintf("tenant-%d", i), i%(MaxPriorityLabelValues+10), "m", "t", 5, 1)
	}
	f = gather(t, reg)
	fids, prios := map[string]bool{}, map[string]bool{}
	var total, bytes float64
	for _, s := range f[NameFlowQueueSize].GetMetric() {
		fids[label(s, "fairness_id")] = true
		prios[label(s, "priority")] = true
		total += s.GetGauge().GetValue()
	}
	for _, s := range f[NameFlowQueueBytes].GetMetric() {
		bytes += s.GetGauge().GetValue()
	}
	assert.LessOrEqual(t, len(fids), MaxFairnessLabelValues+1)
	assert.True(t, fids[OverflowLabelValue])
	assert.LessOrEqual(t, len(prios), MaxPriorityLabelValues+1)
	assert.Equal(t, float64(MaxFairnessLabelValues+50), total, "every request counted, overflow included")
	assert.Equal(t, float64(5*(MaxFairnessLabelValues+50)), bytes)
	var llmd float64
	for _, s := range f[NameLLMDFlowControlQueue].GetMetric() {
		llmd += s.GetGauge().GetValue()
	}
	assert.Equal(t, total, llmd, "llm-d's gauge counts the same requests")
	m.FlowDispatchCycle(time.Millisecond)
	require.Equal(t, uint64(1), gather(t, reg)[NameFlowDispatchCycle].GetMetric()[0].GetHistogram().GetSampleCount())
}

// TestFlowMetricsPairCap hammers the flow metrics from many goroutines
// with 300 tenants × 80 priorities (24,000 flows, each recorded twice):
// the (fairness_id, priority) combinations of every flow family stay
// within MaxFlowLabelPairs plus one overflow pair per priority value
// (not the product of the two label caps), the overflow is fairness_id
// "other" with the priority kept, no request is lost from the gauges, and
// the paired Inc/Dec leave every gauge at 0.
func TestFlowMetricsPairCap(t *testing.T) {
	m, reg := newTest(t)
	const tenants, prios, workers = 300, 80, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < tenants*prios; i += workers {
				fid, p := fmt.Sprintf("tenant-%d", i%tenants), i/tenants
				m.FlowWaiting(fid, p, "m", "t", 7, 1)
				m.FlowDone(fid, p, "m", "t", "Dispatched", time.Microsecond, time.Millisecond)
			}
		}()
	}
	wg.Wait()
	f := gather(t, reg)
	limit := MaxFlowLabelPairs + MaxPriorityLabelValues + 1 + workers // + concurrent first sightings
	for _, name := range []string{NameFlowQueueSize, NameFlowQueueBytes, NameLLMDFlowControlQueue, NameFlowQueueDuration, NameFlowEnqueueDuration} {
		pairs := map[[2]string]bool{}
		overflowPrios := map[string]bool{}
		for _, s := range f[name].GetMetric() {
			fid, p := label(s, "fairness_id"), label(s, "priority")
			if fid == "" && p == "" {
				continue // llm-d's empty series
			}
			pairs[[2]string{fid, p}] = true
			if fid == OverflowLabelValue {
				overflowPrios[p] = true
			}
		}
		assert.LessOrEqual(t, len(pairs), limit, name)
		assert.GreaterOrEqual(t, len(pairs), MaxFlowLabelPairs, name)
		assert.NotEmpty(t, overflowPrios, "%s: pairs past the cap share fairness_id=other", name)
		assert.LessOrEqual(t, len(overflowPrios), MaxPriorityLabelValues+1, name)
	}
	var total, bytes float64
	for _, s := range f[NameFlowQueueSize].GetMetric() {
		total += s.GetGauge().GetValue()
	}
	for _, s := range f[NameFlowQueueBytes].GetMetric() {
		bytes += s.GetGauge().GetValue()
	}
	assert.Equal(t, float64(tenants*prios), total, "every request counted, overflow included")
	assert.Equal(t, float64(7*tenants*prios), bytes)
	var observed uint64
	for _, s := range f[NameFlowQueueDuration].GetMetric() {
		observed += s.GetHistogram().GetSampleCount()
	}
	assert.Equal(t, uint64(tenants*prios), observed)

	for i := range tenants * prios {
		m.FlowWaiting(fmt.Sprintf("tenant-%d", i%tenants), i/tenants, "m", "t", 7, -1)
	}
	for _, s := range gather(t, reg)[NameFlowQueueSize].GetMetric() {
		require.Zero(t, s.GetGauge().GetValue(), "balanced: %v", s.GetLabel())
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func BenchmarkFlowRecord(b *testing.B) {
	m, _ := newTest(b)
	b.ReportAllocs()
	for b.Loop() {
		m.FlowWaiting("tenant-a", 1, "m", "t", 100, 1)
		m.FlowWaiting("tenant-a", 1, "m", "t", 100, -1)
		m.FlowDone("tenant-a", 1, "m", "t", "Dispatched", time.Microsecond, time.Millisecond)
	}
}
