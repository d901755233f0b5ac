package kubesource_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchyard-ai/switchyard/internal/kubetest"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/kubesource"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func annotated(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func TestReadAnnotations(t *testing.T) {
	tests := []struct {
		name     string
		kv       []string
		want     kubesource.PodData
		problems []string // annotation: problem substring
	}{
		{name: "none"},
		{
			name: "all valid",
			kv: []string{kubesource.WeightAnnotation, " 4 ", kubesource.InternalAnnotation, "true",
				kubesource.ModelsAnnotation, `[{"name":"llama","aliases":["l"],"pricing":{"input":1,"output":2}}]`},
			want: kubesource.PodData{Weight: 4, Internal: true, Models: []scheduling.ModelEntry{
				{Name: "llama", Aliases: []string{"l"}, Pricing: &scheduling.Price{Input: 1, Output: 2}}}},
		},
		{
			name: "yaml models, internal false",
			kv:   []string{kubesource.ModelsAnnotation, "- name: a\n- name: b\n  aliases: [c]\n", kubesource.InternalAnnotation, "false"},
			want: kubesource.PodData{Models: []scheduling.ModelEntry{{Name: "a"}, {Name: "b", Aliases: []string{"c"}}}},
		},
		{name: "scrape false", kv: []string{kubesource.ScrapeAnnotation, " false"}, want: kubesource.PodData{NoScrape: true}},
		{name: "scrape true", kv: []string{kubesource.ScrapeAnnotation, "true"}},
		{name: "provider limits", kv: []string{kubesource.ProviderTPMAnnotation, " 200000", kubesource.ProviderRPMAnnotation, "60"},
			want: kubesource.PodData{ProviderTPM: 200000, ProviderRPM: 60}},
		{name: "provider limits invalid", kv: []string{kubesource.ProviderTPMAnnotation, "0", kubesource.ProviderRPMAnnotation, "lots"},
			problems: []string{
				kubesource.ProviderTPMAnnotation + `: want an integer 1..1000000000 (tokens per minute), got "0"`,
				kubesource.ProviderRPMAnnotation + `: want an integer 1..1000000000 (requests per minute), got "lots"`,
			}},
		{name: "scrape invalid", kv: []string{kubesource.ScrapeAnnotation, "no"},
			problems: []string{kubesource.ScrapeAnnotation + `: want "true" or "false", got "no"`}},
		{
			name: "each invalid value ignored on its own",
			kv:   []string{kubesource.WeightAnnotation, "0", kubesource.InternalAnnotation, "yes", kubesource.ModelsAnnotation, "[{name: a, alias: [b]}]"},
			problems: []string{
				kubesource.WeightAnnotation + `: want an integer 1..1000000, got "0"`,
				kubesource.InternalAnnotation + `: want "true" or "false", got "yes"`,
				kubesource.ModelsAnnotation + `: models[0].alias: unknown field "alias" (did you mean "aliases"?)`,
			},
		},
		{
			name:     "weight too large, valid models kept",
			kv:       []string{kubesource.WeightAnnotation, "1000001", kubesource.ModelsAnnotation, "[{name: a}]"},
			want:     kubesource.PodData{Models: []scheduling.ModelEntry{{Name: "a"}}},
			problems: []string{kubesource.WeightAnnotation + ": want an integer"},
		},
		{
			name:     "models not a list",
			kv:       []string{kubesource.ModelsAnnotation, "llama"},
			problems: []string{kubesource.ModelsAnnotation + ": models: expected a list of models"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod("p", "127.10.0.1", true, annotated(tt.kv...))
			got, problems := kubesource.ReadAnnotations(&p)
			assert.Equal(t, tt.want, got)
			require.Len(t, problems, len(tt.problems), "%v", problems)
			for i, want := range tt.problems {
				assert.Equal(t, "ns/p", problems[i].Pod)
				assert.Contains(t, problems[i].Annotation+": "+problems[i].Problem, want)
				assert.Contains(t, problems[i].String(), "pod ns/p: annotation "+problems[i].Annotation+" ignored")
			}
		})
	}
}

// Every rank of a pod gets its annotations' data; an invalid value leaves
// the pod serving without it; the pod cache keeps the annotations.
func TestEndpointsAnnotations(t *testing.T) {
	pods := []corev1.Pod{
		pod("a", "127.10.0.1", true, annotated(kubesource.WeightAnnotation, "3", kubesource.InternalAnnotation, "true",
			kubesource.ModelsAnnotation, "[{name: m, aliases: [x]}]", kubesource.ScrapeAnnotation, "false", "unrelated", strings.Repeat("x", 100))),
		pod("b", "127.10.0.2", true, annotated(kubesource.WeightAnnotation, "heavy", kubesource.ModelsAnnotation, "[")),
	}
	for _, trimmed := range []bool{false, true} {
		in := pods
		if trimmed {
			in = nil
			for i := range pods {
				tp, err := kubesource.TrimPod(&pods[i])
				require.NoError(t, err)
				in = append(in, *tp.(*corev1.Pod))
			}
			assert.NotContains(t, in[0].Annotations, "unrelated")
		}
		specs, skipped := kubesource.Endpoints(in, []int{8000, 8001}, 0)
		require.Empty(t, skipped)
		require.Len(t, specs, 4)
		for _, sp := range specs[:2] {
			assert.Equal(t, 3, sp.Weight, sp.Name)
			assert.True(t, sp.Internal, sp.Name)
			assert.True(t, sp.NoScrape, sp.Name)
			assert.Equal(t, []scheduling.ModelEntry{{Name: "m", Aliases: []string{"x"}}}, sp.Models, sp.Name)
		}
		for _, sp := range specs[2:] {
			assert.Zero(t, sp.Weight, "invalid weight ignored")
			assert.Nil(t, sp.Models, "invalid models ignored")
			assert.False(t, sp.Internal)
			assert.False(t, sp.NoScrape)
		}
		require.NoError(t, datastore.ValidateSpecs(specs))
	}
}

// logCounter counts the "invalid annotation" lines per annotation.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *logCounter) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		if !strings.Contains(args, "Invalid pod annotation ignored") {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, k := range []string{kubesource.WeightAnnotation, kubesource.ModelsAnnotation, kubesource.InternalAnnotation} {
			if strings.Contains(args, `"annotation"="`+k+`"`) {
				c.n[k]++
			}
		}
	}, funcr.Options{})
}

func (c *logCounter) count(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// The switchyard.ai annotations against a real API server: the store's
// endpoints carry the weight, models and internal flag; an invalid value
// is logged once (not at every resync) and ignored, the pod still serving.
func TestPodAnnotationsAgainstAPIServer(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ns := env.Namespace(t, "annotations")
	store := datastore.New(datastore.Options{})
	logs := &logCounter{n: map[string]int{}}
	src, err := kubesource.New(store, kubesource.Options{
		Config: env.Config, Namespace: ns,
		Selector:    labels.SelectorFromSet(labels.Set{"app": "sim"}),
		TargetPorts: []int{8000},
		Logger:      logs.logger(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	good := env.CreatePod(t, kubetest.Pod{Name: "good", Namespace: ns, IP: "127.10.9.1", Ready: true, Labels: map[string]string{"app": "sim"}})
	env.Update(t, good, func() {
		good.Annotations = map[string]string{
			kubesource.WeightAnnotation:   "5",
			kubesource.InternalAnnotation: "true",
			kubesource.ModelsAnnotation:   `[{"name": "llama-3-8b", "aliases": ["llama"], "pricing": {"input": 0.1, "output": 0.3}}]`,
		}
	})
	bad := env.CreatePod(t, kubetest.Pod{Name: "bad", Namespace: ns, IP: "127.10.9.2", Ready: true, Labels: map[string]string{"app": "sim"}})
	env.Update(t, bad, func() {
		bad.Annotations = map[string]string{kubesource.WeightAnnotation: "-1", kubesource.ModelsAnnotation: "[{name: }]"}
	})

	lookup := func(name string) (*scheduling.Endpoint, bool) { return store.Snapshot().Lookup(ns + "/" + name) }
	require.Eventually(t, func() bool {
		g, ok1 := lookup("good-rank-0")
		_, ok2 := lookup("bad-rank-0")
		if !ok1 || !ok2 {
			return false
		}
		w, _ := scheduling.WeightKey.Get(g)
		return w == 5
	}, 10*time.Second, 10*time.Millisecond)
	g, _ := lookup("good-rank-0")
	internal, _ := scheduling.InternalKey.Get(g)
	assert.True(t, internal)
	m, ok := scheduling.ModelsKey.Get(g)
	require.True(t, ok)
	e, ok := m.Lookup("llama")
	require.True(t, ok)
	assert.Equal(t, "llama-3-8b", e.Name)
	assert.Equal(t, 0.3, e.Pricing.Output)
	b, _ := lookup("bad-rank-0")
	w, _ := scheduling.WeightKey.Get(b)
	assert.Equal(t, 1, w, "the invalid weight is ignored: the default")
	_, ok = scheduling.ModelsKey.Get(b)
	assert.False(t, ok, "the invalid models are ignored: serves every model")
	require.Eventually(t, func() bool {
		return logs.count(kubesource.WeightAnnotation) == 1 && logs.count(kubesource.ModelsAnnotation) == 1
	}, 5*time.Second, 10*time.Millisecond)

	// More passes (another pod changes) do not log the same values again.
	other := env.CreatePod(t, kubetest.Pod{Name: "other", Namespace: ns, IP: "127.10.9.3", Ready: true, Labels: map[string]string{"app": "sim"}})
	require.Eventually(t, func() bool { _, ok := lookup("other-rank-0"); return ok }, 10*time.Second, 10*time.Millisecond)
	env.SetPodStatus(t, other, "127.10.9.3", false)
	require.Eventually(t, func() bool { _, ok := lookup("other-rank-0"); return !ok }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, logs.count(kubesource.WeightAnnotation), "logged once")
	assert.Equal(t, 1, logs.count(kubesource.ModelsAnnotation), "logged once")

	// Another invalid value is news; a fixed one applies.
	env.Update(t, bad, func() { bad.Annotations[kubesource.WeightAnnotation] = "lots" })
	require.Eventually(t, func() bool { return logs.count(kubesource.WeightAnnotation) == 2 }, 5*time.Second, 10*time.Millisecond)
	env.Update(t, bad, func() { bad.Annotations[kubesource.WeightAnnotation] = "2" })
	require.Eventually(t, func() bool {
		b, _ := lookup("bad-rank-0")
		w, _ := scheduling.WeightKey.Get(b)
		return w == 2
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, logs.count(kubesource.ModelsAnnotation))
}
