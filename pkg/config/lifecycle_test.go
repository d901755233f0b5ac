package config_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

const (
	durationSeries = "inference_extension_plugin_duration_seconds"
	indexSizeGauge = "inference_extension_prefix_indexer_size"
)

// family returns the metrics of one family in reg, by their labels
// ("k=v,k=v", sorted as gathered).
func family(t *testing.T, reg prometheus.Gatherer, name string) map[string]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, lp := range m.GetLabel() {
				kv = append(kv, lp.GetName()+"="+lp.GetValue())
			}
			out[strings.Join(kv, ",")] = m
		}
	}
	return out
}

// serve runs one request through a configuration's scheduler, from
// scheduling to completion, so that every extension point observes.
func serve(t *testing.T, l *config.Loaded, eps []*scheduling.Endpoint) {
	t.Helper()
	ctx := context.Background()
	req := &scheduling.Request{ID: "r", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: []byte(strings.Repeat("the same long prompt ", 40))}}
	res, err := l.Scheduler.Process(ctx, req, eps)
	require.NoError(t, err)
	target := res.Targets()[0]
	l.Scheduler.ResponseReceived(ctx, req, &scheduling.Response{}, target)
	l.Scheduler.ResponseComplete(ctx, req, &scheduling.Response{}, target)
}

// renamedDoc names every plugin after generation i.
func renamedDoc(i int) string {
	return fmt.Sprintf(header+`plugins:
- {type: queue-scorer, name: queue-%[1]d}
- {type: approx-prefix-cache-producer, name: producer-%[1]d}
- {type: prefix-cache-scorer, name: prefix-%[1]d}
- {type: max-score-picker, name: picker-%[1]d}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-%[1]d}, {pluginRef: prefix-%[1]d}, {pluginRef: picker-%[1]d}]
`, i)
}

// Regression (issue 9, finding 4): reloads that rename plugins used to
// leave every old name's series behind. After each reload and release,
// the series count is the steady count of one configuration.
func TestReloadRenamesLeaveNoSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := config.Options{Registry: plugins.InTree(), Context: t.Context(), Registerer: reg, Seed: 1}
	eps := schedulingtest.Endpoints(3, nil)
	cur, err := config.Load([]byte(renamedDoc(0)), opts)
	require.NoError(t, err)
	serve(t, cur, eps)
	steady, steadySize := len(family(t, reg, durationSeries)), len(family(t, reg, indexSizeGauge))
	require.NotZero(t, steady)
	require.Equal(t, 1, steadySize)
	for i := 1; i <= 200; i++ {
		o := opts
		o.Previous = cur
		next, err := config.Load([]byte(renamedDoc(i)), o)
		require.NoError(t, err)
		serve(t, next, eps)
		serve(t, cur, eps) // a request still running on the old configuration
		cur.Release(next)
		serve(t, cur, eps) // and one after: closed instances stay safe
		cur = next
		require.Equal(t, steady, len(family(t, reg, durationSeries)), "%s series after reload %d", durationSeries, i)
		require.Equal(t, steadySize, len(family(t, reg, indexSizeGauge)), "%s series after reload %d", indexSizeGauge, i)
	}
	generation := regexp.MustCompile(`-(\d+)(,|$)`)
	for k := range family(t, reg, durationSeries) {
		if m := generation.FindStringSubmatch(k); m != nil {
			require.Equal(t, "200", m[1], "only the last generation's names remain: %s", k)
		}
	}
	cur.Close()
	require.Empty(t, family(t, reg, durationSeries), "shutdown releases every series")
	require.Empty(t, family(t, reg, indexSizeGauge))
}

// probe is a test filter that shows its context and its Close calls.
type probe struct {
	name, tag string
	ctx       context.Context
	mu        sync.Mutex
	closes    []scheduling.CloseInfo
}

func (p *probe) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: probeType, Name: p.name}
}
func (p *probe) Filter(_ context.Context, _ *scheduling.Request, eps []*scheduling.Endpoint) []*scheduling.Endpoint {
	return eps
}
func (p *probe) Close(info scheduling.CloseInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closes = append(p.closes, info)
}

func (p *probe) done() bool { return p.ctx.Err() != nil }

func (p *probe) closed() []scheduling.CloseInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]scheduling.CloseInfo(nil), p.closes...)
}

const probeType = "probe-filter"

type probeParams struct {
	Tag string `json:"tag"`
}

// probes is a registry with the in-tree plugins and probe-filter, and the
// probes built so far by name, newest last.
type probes struct {
	mu    sync.Mutex
	built map[string][]*probe
}

func newProbes() (*scheduling.Registry, *probes) {
	ps := &probes{built: map[string][]*probe{}}
	reg := plugins.InTree()
	reg.MustRegister(scheduling.Registration{Type: probeType, Stability: scheduling.Alpha, Factory: scheduling.Typed(
		func() probeParams { return probeParams{} },
		func(name string, p probeParams, h scheduling.Handle) (*probe, error) {
			pr := &probe{name: name, tag: p.Tag, ctx: h.Context()}
			ps.mu.Lock()
			ps.built[name] = append(ps.built[name], pr)
			ps.mu.Unlock()
			return pr, nil
		})})
	return reg, ps
}

// get returns the i-th probe built under name (-1: the last).
func (ps *probes) get(t *testing.T, name string, i int) *probe {
	t.Helper()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	b := ps.built[name]
	if i < 0 {
		i += len(b)
	}
	require.True(t, i >= 0 && i < len(b), "probe %q #%d not built (%d built)", name, i, len(b))
	return b[i]
}

func probeDoc(probes ...string) string {
	var b strings.Builder
	b.WriteString(header + "plugins:\n")
	for _, p := range probes {
		name, tag, _ := strings.Cut(p, "=")
		fmt.Fprintf(&b, "- {type: %s, name: %s, parameters: {tag: %q}}\n", probeType, name, tag)
	}
	return b.String()
}

var (
	successor = []scheduling.CloseInfo{{Successor: true, TypeServes: true}}
	// renamed: nothing of the name serves on, an instance of the type does.
	renamed     = []scheduling.CloseInfo{{Successor: false, TypeServes: true}}
	noSuccessor = []scheduling.CloseInfo{{Successor: false}}
)

// Every instance has its own context: cancelled and closed when the
// instance is dropped (renamed, removed, rebuilt, a discarded duplicate,
// every instance of a failed load), left alone while it is kept.
func TestInstanceLifecycle(t *testing.T) {
	reg, ps := newProbes()
	opts := config.Options{Registry: reg, Context: t.Context(), Registerer: prometheus.NewRegistry(), Seed: 1}
	gen1, err := config.Load([]byte(probeDoc("a=1", "b=1", "c=1")), opts)
	require.NoError(t, err)
	a, b, c := ps.get(t, "a", 0), ps.get(t, "b", 0), ps.get(t, "c", 0)
	require.NotSame(t, a.ctx, b.ctx)
	for _, p := range []*probe{a, b, c} {
		require.False(t, p.done())
	}

	// gen2 keeps a, renames b to b2, rebuilds c with other parameters.
	o := opts
	o.Previous = gen1
	gen2, err := config.Load([]byte(probeDoc("a=1", "b2=1", "c=2", "d=1")), o)
	require.NoError(t, err)
	require.Contains(t, gen2.Kept, "a")
	require.NotContains(t, gen2.Kept, "c")
	dup := ps.get(t, "a", 1)
	require.True(t, dup.done(), "the duplicate built to compare a's parameters is discarded")
	require.Equal(t, successor, dup.closed())
	require.False(t, a.done(), "nothing of gen1 ends before it is released")
	require.False(t, b.done())
	require.Empty(t, b.closed())

	gen1.Release(gen2)
	require.False(t, a.done(), "a kept instance keeps its context")
	require.Empty(t, a.closed())
	require.True(t, b.done(), "a renamed instance is dropped")
	require.Equal(t, renamed, b.closed())
	require.True(t, c.done(), "a rebuilt instance is dropped")
	require.Equal(t, successor, c.closed(), "a rebuilt instance has a successor")
	b2, c2, d := ps.get(t, "b2", 0), ps.get(t, "c", 1), ps.get(t, "d", 0)
	for _, p := range []*probe{b2, c2, d} {
		require.False(t, p.done())
	}
	gen1.Release(gen2) // idempotent
	require.Len(t, b.closed(), 1)

	// A failed load closes what it built and nothing that serves.
	o.Previous = gen2
	_, err = config.Load([]byte(probeDoc("a=1", "c=3", "e=1")+"- type: no-such-plugin\n"), o)
	require.Error(t, err)
	for _, p := range []*probe{a, b2, c2, d} {
		require.False(t, p.done(), p.name)
		require.Empty(t, p.closed(), p.name)
	}
	require.Equal(t, successor, ps.get(t, "a", -1).closed(), "a's duplicate")
	require.Equal(t, successor, ps.get(t, "c", -1).closed(), "gen2's c serves under that name")
	require.Equal(t, renamed, ps.get(t, "e", -1).closed())
	require.True(t, ps.get(t, "e", -1).done())

	// A loaded configuration the host refuses is released against the
	// one that keeps serving.
	gen3, err := config.Load([]byte(probeDoc("a=1", "f=1")), o)
	require.NoError(t, err)
	gen3.Release(gen2)
	require.False(t, a.done(), "kept by gen3, still served by gen2")
	require.Equal(t, renamed, ps.get(t, "f", -1).closed())

	// Shutdown closes everything; a released configuration keeps nothing.
	gen2.Close()
	for _, p := range []*probe{a, b2, c2, d} {
		require.True(t, p.done(), p.name)
		require.Equal(t, noSuccessor, p.closed(), p.name)
	}
	o.Previous = gen2
	gen4, err := config.Load([]byte(probeDoc("a=1")), o)
	require.NoError(t, err)
	require.Empty(t, gen4.Kept)
	require.False(t, ps.get(t, "a", -1).done())
	gen4.Close()
}

// Cancelling Options.Context ends every instance's context.
func TestInstanceContextsFollowOptionsContext(t *testing.T) {
	reg, ps := newProbes()
	ctx, cancel := context.WithCancel(t.Context())
	l, err := config.Load([]byte(probeDoc("a=1")), config.Options{Registry: reg, Context: ctx})
	require.NoError(t, err)
	defer l.Close()
	require.False(t, ps.get(t, "a", 0).done())
	cancel()
	require.True(t, ps.get(t, "a", 0).done())
}

// paramsDoc names the prefix producer and scorer "producer" and "prefix"
// whatever their parameters, and a scorer x of the given type.
func paramsDoc(blockSize int, xType string) string {
	return fmt.Sprintf(header+`plugins:
- {type: approx-prefix-cache-producer, name: producer, parameters: {blockSizeTokens: %[1]d}}
- {type: prefix-cache-scorer, name: prefix, parameters: {blockSizeTokens: %[1]d}}
- {type: %[2]s, name: x}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: prefix}, {pluginRef: x}, {pluginRef: max-score-picker}]
`, blockSize, xType)
}

// A plugin rebuilt under the same name and type (new parameters) keeps a
// live series that goes on counting: releasing the old instance must not
// delete the child the new one holds. A name that changes type loses the
// old type's series only.
func TestReloadKeepsSeriesOfRebuiltPlugins(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := config.Options{Registry: plugins.InTree(), Context: t.Context(), Registerer: reg, Seed: 1}
	eps := schedulingtest.Endpoints(3, nil)
	gen1, err := config.Load([]byte(paramsDoc(16, "queue-scorer")), opts)
	require.NoError(t, err)
	serve(t, gen1, eps)
	const prefixScorer = "extension_point=Scorer,plugin_name=prefix,plugin_type=prefix-cache-scorer"
	const producerPrep = "extension_point=PrepareData,plugin_name=producer,plugin_type=approx-prefix-cache-producer"
	const xQueue = "extension_point=Scorer,plugin_name=x,plugin_type=queue-scorer"
	const xKV = "extension_point=Scorer,plugin_name=x,plugin_type=kv-cache-utilization-scorer"
	require.EqualValues(t, 1, family(t, reg, durationSeries)[prefixScorer].GetHistogram().GetSampleCount())

	o := opts
	o.Previous = gen1
	gen2, err := config.Load([]byte(paramsDoc(32, "kv-cache-utilization-scorer")), o)
	require.NoError(t, err)
	require.NotContains(t, gen2.Kept, "prefix")
	require.NotContains(t, gen2.Kept, "producer")
	gen1.Release(gen2)
	serve(t, gen2, eps)
	serve(t, gen2, eps)

	durations := family(t, reg, durationSeries)
	require.Contains(t, durations, prefixScorer)
	require.EqualValues(t, 3, durations[prefixScorer].GetHistogram().GetSampleCount(), "the rebuilt scorer's series stays and counts on")
	require.EqualValues(t, 3, durations[producerPrep].GetHistogram().GetSampleCount())
	require.NotContains(t, durations, xQueue, "x's old type's series is deleted")
	require.EqualValues(t, 2, durations[xKV].GetHistogram().GetSampleCount())

	size := family(t, reg, indexSizeGauge)["plugin_name=producer"]
	require.NotNil(t, size, "the rebuilt producer's size series stays")
	producer := gen2.Plugins["producer"].(interface{ IndexSize() int })
	require.NotZero(t, producer.IndexSize())
	require.EqualValues(t, producer.IndexSize(), size.GetGauge().GetValue(), "and shows the new instance's index")
	gen2.Close()
}
