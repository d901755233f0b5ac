package metrics

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gaugeOf(t *testing.T, f map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	require.NotNil(t, f[name], name)
	require.Len(t, f[name].GetMetric(), 1, name)
	m := f[name].GetMetric()[0]
	require.Equal(t, "name", m.GetLabel()[0].GetName())
	require.Equal(t, "pool-a", m.GetLabel()[0].GetValue())
	return m.GetGauge().GetValue()
}

func perPod(f map[string]*dto.MetricFamily, name, podLabel string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == podLabel {
				out[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func TestUpdatePool(t *testing.T) {
	tests := []struct {
		name                    string
		samples                 []PoolSample
		ready                   float64
		avgKV, avgQueue, avgRun float64
		pods                    map[string]float64
	}{
		{
			name: "stale excluded from averages, kept per pod",
			samples: []PoolSample{
				{Name: "a", Ready: true, Queue: 2, Running: 4, KVUsage: 0.2},
				{Name: "b", Ready: true, Queue: 4, Running: 6, KVUsage: 0.6},
				{Name: "c", Ready: false, Queue: 100, Running: 100, KVUsage: 1},
			},
			ready: 2, avgKV: 0.4, avgQueue: 3, avgRun: 5,
			pods: map[string]float64{"a": 2, "b": 4, "c": 100},
		},
		{
			name:    "no ready sample: zeros",
			samples: []PoolSample{{Name: "c", Queue: 7, Running: 1, KVUsage: 0.9}},
			pods:    map[string]float64{"c": 7},
		},
		{
			name: "empty pool",
			pods: map[string]float64{},
		},
		{
			name: "duplicate names: last wins",
			samples: []PoolSample{
				{Name: "a", Ready: true, Queue: 1, KVUsage: 0.1},
				{Name: "a", Ready: true, Queue: 3, KVUsage: 0.3},
			},
			ready: 1, avgKV: 0.3, avgQueue: 3,
			pods: map[string]float64{"a": 3},
		},
		{
			name: "non-finite and negative KV count as 0",
			samples: []PoolSample{
				{Name: "a", Ready: true, KVUsage: math.NaN()},
				{Name: "b", Ready: true, KVUsage: math.Inf(1)},
				{Name: "c", Ready: true, KVUsage: -1},
				{Name: "d", Ready: true, KVUsage: 0.8},
			},
			ready: 4, avgKV: 0.2,
			pods: map[string]float64{"a": 0, "b": 0, "c": 0, "d": 0},
		},
		{
			name: "names that sanitize alike are one series",
			samples: []PoolSample{
				{Name: "x\xff", Ready: true, Queue: 1},
				{Name: "x\xfe", Ready: true, Queue: 5},
			},
			ready: 1, avgQueue: 5,
			pods: map[string]float64{"x\uFFFD": 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newTest(t)
			m.UpdatePool(tt.samples)
			f := gather(t, reg)
			for _, n := range []string{NamePoolReadyPods, NameLLMDReadyEndpoints} {
				assert.Equal(t, tt.ready, gaugeOf(t, f, n), n)
			}
			for _, n := range []string{NamePoolAvgKVCache, NameLLMDAvgKVCache} {
				assert.InDelta(t, tt.avgKV, gaugeOf(t, f, n), 1e-12, n)
			}
			for _, n := range []string{NamePoolAvgQueueSize, NameLLMDAvgQueueSize} {
				assert.InDelta(t, tt.avgQueue, gaugeOf(t, f, n), 1e-12, n)
			}
			for _, n := range []string{NamePoolAvgRunning, NameLLMDAvgRunning} {
				assert.InDelta(t, tt.avgRun, gaugeOf(t, f, n), 1e-12, n)
			}
			assert.Equal(t, tt.pods, perPod(f, NamePoolPerPodQueueSize, "model_server_pod"))
			assert.Equal(t, tt.pods, perPod(f, NameLLMDPerEndpointQueue, "model_server_endpoint"))
		})
	}
}

// TestPoolPodsLeave: a pod missing from the next update loses its per-pod
// series; the averages follow the new set.
func TestPoolPodsLeave(t *testing.T) {
	m, reg := newTest(t)
	m.UpdatePool([]PoolSample{{Name: "a", Ready: true, Queue: 1}, {Name: "b", Ready: true, Queue: 3}})
	f := gather(t, reg)
	assert.Equal(t, map[string]float64{"a": 1, "b": 3}, perPod(f, NamePoolPerPodQueueSize, "model_server_pod"))
	m.UpdatePool([]PoolSample{{Name: "b", Ready: true, Queue: 5}})
	f = gather(t, reg)
	assert.Equal(t, map[string]float64{"b": 5}, perPod(f, NamePoolPerPodQueueSize, "model_server_pod"))
	assert.Equal(t, map[string]float64{"b": 5}, perPod(f, NameLLMDPerEndpointQueue, "model_server_endpoint"))
	assert.Equal(t, 5.0, gaugeOf(t, f, NamePoolAvgQueueSize))
	assert.Equal(t, 1.0, gaugeOf(t, f, NamePoolReadyPods))
	m.UpdatePool(nil)
	f = gather(t, reg)
	assert.Empty(t, f[NamePoolPerPodQueueSize].GetMetric())
	assert.Equal(t, 0.0, gaugeOf(t, f, NamePoolReadyPods))
}

// TestPoolBeforeFirstUpdate: no pool series before the first UpdatePool
// (as GIE, whose gauges appear with the first refresh).
func TestPoolBeforeFirstUpdate(t *testing.T) {
	_, reg := newTest(t)
	f := gather(t, reg)
	assert.Nil(t, f[NamePoolAvgQueueSize])
	assert.Nil(t, f[NamePoolPerPodQueueSize])
}
