package scheduling_test

import (
	"math"
	"reflect"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestPrefixMatchHelpers(t *testing.T) {
	t.Parallel()
	a := schedulingtest.Endpoint("a").Namespace("ns").Build()
	b := schedulingtest.Endpoint("b").Namespace("ns").Build()
	tests := []struct {
		name        string
		match       *scheduling.PrefixMatch
		ep          *scheduling.Endpoint
		wantRatio   float64
		wantBlocks  int
		wantHitsLen int
	}{
		{name: "nil match", match: nil, ep: a},
		{name: "no blocks looked up", match: &scheduling.PrefixMatch{TotalBlocks: 0, Hits: scheduling.PrefixHitMap{"ns/a": 3}}, ep: a, wantBlocks: 3, wantHitsLen: 1},
		{name: "nil hits", match: &scheduling.PrefixMatch{TotalBlocks: 4}, ep: a},
		{name: "partial hit", match: &scheduling.PrefixMatch{TotalBlocks: 4, Hits: scheduling.PrefixHitMap{"ns/a": 3}}, ep: a, wantRatio: 0.75, wantBlocks: 3, wantHitsLen: 1},
		{name: "full hit", match: &scheduling.PrefixMatch{TotalBlocks: 4, Hits: scheduling.PrefixHitMap{"ns/a": 4, "ns/b": 1}}, ep: a, wantRatio: 1, wantBlocks: 4, wantHitsLen: 2},
		{name: "endpoint without a hit", match: &scheduling.PrefixMatch{TotalBlocks: 4, Hits: scheduling.PrefixHitMap{"ns/a": 4}}, ep: b, wantHitsLen: 1},
		{name: "zero entries are not hits", match: &scheduling.PrefixMatch{TotalBlocks: 4, Hits: scheduling.PrefixHitMap{"ns/a": 0, "ns/b": 2}}, ep: a, wantHitsLen: 1},
		{name: "matched by key, not by name", match: &scheduling.PrefixMatch{TotalBlocks: 2, Hits: scheduling.PrefixHitMap{"a": 2}}, ep: a, wantHitsLen: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.match.Ratio(tt.ep); math.Abs(got-tt.wantRatio) > 1e-12 {
				t.Errorf("Ratio() = %v, want %v", got, tt.wantRatio)
			}
			if got := tt.match.MatchedBlocks(tt.ep); got != tt.wantBlocks {
				t.Errorf("MatchedBlocks() = %d, want %d", got, tt.wantBlocks)
			}
			if got := tt.match.HitCount(); got != tt.wantHitsLen {
				t.Errorf("HitCount() = %d, want %d", got, tt.wantHitsLen)
			}
		})
	}
}

func TestPrefixHitMap(t *testing.T) {
	t.Parallel()
	m := scheduling.PrefixHitMap{"ns/a": 3, "ns/b": 0, "ns/c": 1}
	if m.Len() != 2 {
		t.Errorf("Len() = %d, want 2", m.Len())
	}
	got := map[string]int{}
	m.Range(func(k string, b int) bool {
		got[k] = b
		return true
	})
	if !reflect.DeepEqual(got, map[string]int{"ns/a": 3, "ns/c": 1}) {
		t.Errorf("Range visited %v", got)
	}
	calls := 0
	m.Range(func(string, int) bool {
		calls++
		return false
	})
	if calls != 1 {
		t.Errorf("Range went on after false: %d calls", calls)
	}
	var empty scheduling.PrefixHitMap
	if empty.Len() != 0 || empty.MatchedBlocks(schedulingtest.Endpoint("a").Build()) != 0 {
		t.Error("a nil PrefixHitMap has hits")
	}
}

func TestStateKey(t *testing.T) {
	t.Parallel()
	intKey := scheduling.NewStateKey[int]("count")
	sameIntKey := scheduling.NewStateKey[int]("count")
	strKey := scheduling.NewStateKey[string]("count")
	other := scheduling.NewStateKey[int]("other")
	if intKey.Name() != "count" {
		t.Errorf("Name() = %q, want count", intKey.Name())
	}

	req := &scheduling.Request{}
	if v, ok := intKey.Get(req); ok || v != 0 {
		t.Errorf("Get on a fresh request = %v, %v; want 0, false", v, ok)
	}
	intKey.Delete(req) // no state yet: must not panic

	intKey.Set(req, 3)
	if v, ok := intKey.Get(req); !ok || v != 3 {
		t.Errorf("Get after Set = %v, %v; want 3, true", v, ok)
	}
	if v, ok := sameIntKey.Get(req); !ok || v != 3 {
		t.Errorf("a key with the same name and type got %v, %v; want 3, true", v, ok)
	}
	if v, ok := strKey.Get(req); ok || v != "" {
		t.Errorf("a key with the same name and another type got %q, %v; want \"\", false", v, ok)
	}
	if _, ok := other.Get(req); ok {
		t.Errorf("a key with another name found a value")
	}

	intKey.Set(req, 5)
	if v, _ := intKey.Get(req); v != 5 {
		t.Errorf("Get after a second Set = %v, want 5", v)
	}
	if _, ok := intKey.Get(&scheduling.Request{}); ok {
		t.Errorf("state leaked to another request")
	}

	intKey.Delete(req)
	if v, ok := intKey.Get(req); ok || v != 0 {
		t.Errorf("Get after Delete = %v, %v; want 0, false", v, ok)
	}
}

func TestStateKeyWellKnown(t *testing.T) {
	t.Parallel()
	req := &scheduling.Request{}
	if m, ok := scheduling.PrefixMatchKey.Get(req); ok || m != nil {
		t.Errorf("PrefixMatchKey.Get on a fresh request = %v, %v", m, ok)
	}
	want := &scheduling.PrefixMatch{TotalBlocks: 2, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{"a": 1}}
	scheduling.PrefixMatchKey.Set(req, want)
	if got, ok := scheduling.PrefixMatchKey.Get(req); !ok || got != want {
		t.Errorf("PrefixMatchKey.Get = %v, %v; want %v", got, ok, want)
	}
	if scheduling.PrefixMatchKey.Name() == scheduling.InFlightLoadKey.Name() {
		t.Errorf("well-known keys share the name %q", scheduling.PrefixMatchKey.Name())
	}
	if _, ok := scheduling.InFlightLoadKey.Get(req); ok {
		t.Errorf("InFlightLoadKey found a value that was never set")
	}
}

// TestStateKeyConcurrent sets and reads state from several goroutines
// (run with -race): producers and hooks may touch one request at once.
func TestStateKeyConcurrent(t *testing.T) {
	t.Parallel()
	req := &scheduling.Request{}
	var wg sync.WaitGroup
	for i := range 8 {
		key := scheduling.NewStateKey[int]("k" + string(rune('a'+i)))
		wg.Go(func() {
			for j := range 100 {
				key.Set(req, j)
				if v, ok := key.Get(req); !ok || v != j {
					t.Errorf("%s: Get = %v, %v; want %d", key.Name(), v, ok, j)
					return
				}
				if j%10 == 0 {
					key.Delete(req)
				}
			}
		})
	}
	wg.Wait()
}

func TestAttributeKey(t *testing.T) {
	t.Parallel()
	withAttrs := schedulingtest.Endpoint("a").Attr("gpu", "a100").Attr("slots", 4).Build()
	noAttrs := schedulingtest.Endpoint("b").Build()
	gpu := scheduling.NewAttributeKey[string]("gpu")
	slots := scheduling.NewAttributeKey[int]("slots")
	gpuAsInt := scheduling.NewAttributeKey[int]("gpu")
	missing := scheduling.NewAttributeKey[string]("missing")

	if gpu.Name() != "gpu" {
		t.Errorf("Name() = %q, want gpu", gpu.Name())
	}
	if v, ok := gpu.Get(withAttrs); !ok || v != "a100" {
		t.Errorf("gpu.Get = %q, %v; want a100, true", v, ok)
	}
	if v, ok := slots.Get(withAttrs); !ok || v != 4 {
		t.Errorf("slots.Get = %v, %v; want 4, true", v, ok)
	}
	if v, ok := gpuAsInt.Get(withAttrs); ok || v != 0 {
		t.Errorf("gpu read as int = %v, %v; want 0, false", v, ok)
	}
	if _, ok := missing.Get(withAttrs); ok {
		t.Errorf("missing.Get found a value")
	}
	if _, ok := gpu.Get(noAttrs); ok {
		t.Errorf("gpu.Get on an endpoint without attributes found a value")
	}
	if v, ok := withAttrs.Attribute("slots"); !ok || v != 4 {
		t.Errorf("Attribute(slots) = %v, %v", v, ok)
	}
}

func TestNewEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		meta         scheduling.EndpointMetadata
		wantKey      string
		wantHostPort string
		wantString   string
	}{
		{
			name:         "name only",
			meta:         scheduling.EndpointMetadata{Name: "vllm-0", Address: "127.0.0.1", Port: 8000},
			wantKey:      "vllm-0",
			wantHostPort: "127.0.0.1:8000",
			wantString:   "vllm-0(127.0.0.1:8000)",
		},
		{
			name:         "namespace",
			meta:         scheduling.EndpointMetadata{Name: "vllm-0", Namespace: "inference", Address: "127.0.0.2", Port: 8001},
			wantKey:      "inference/vllm-0",
			wantHostPort: "127.0.0.2:8001",
			wantString:   "vllm-0(127.0.0.2:8001)",
		},
		{
			name:         "site and namespace",
			meta:         scheduling.EndpointMetadata{Name: "vllm-0", Namespace: "inference", Site: "eu-west", Address: "127.0.0.3", Port: 8000},
			wantKey:      "eu-west:inference/vllm-0",
			wantHostPort: "127.0.0.3:8000",
			wantString:   "vllm-0(127.0.0.3:8000)",
		},
		{
			name:         "site without namespace",
			meta:         scheduling.EndpointMetadata{Name: "vllm-0", Site: "eu-west", Address: "127.0.0.4", Port: 8000},
			wantKey:      "eu-west:vllm-0",
			wantHostPort: "127.0.0.4:8000",
			wantString:   "vllm-0(127.0.0.4:8000)",
		},
		{
			name:         "IPv6 is bracketed",
			meta:         scheduling.EndpointMetadata{Name: "v6", Address: "::1", Port: 8000},
			wantKey:      "v6",
			wantHostPort: "[::1]:8000",
			wantString:   "v6([::1]:8000)",
		},
		{
			name:         "host name",
			meta:         scheduling.EndpointMetadata{Name: "local", Address: "localhost", Port: 9000},
			wantKey:      "local",
			wantHostPort: "localhost:9000",
			wantString:   "local(localhost:9000)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := scheduling.Metrics{WaitingQueueSize: 2, KVCacheUsagePercent: 0.5}
			e := scheduling.NewEndpoint(tt.meta, m, nil)
			if e.Key() != tt.wantKey {
				t.Errorf("Key() = %q, want %q", e.Key(), tt.wantKey)
			}
			if k := scheduling.EndpointKey(tt.meta.Site, tt.meta.Namespace, tt.meta.Name); k != tt.wantKey {
				t.Errorf("EndpointKey() = %q, want %q", k, tt.wantKey)
			}
			if e.HostPort() != tt.wantHostPort {
				t.Errorf("HostPort() = %q, want %q", e.HostPort(), tt.wantHostPort)
			}
			if e.String() != tt.wantString {
				t.Errorf("String() = %q, want %q", e.String(), tt.wantString)
			}
			if e.Name() != tt.meta.Name {
				t.Errorf("Name() = %q, want %q", e.Name(), tt.meta.Name)
			}
			if !reflect.DeepEqual(*e.Metadata(), tt.meta) {
				t.Errorf("Metadata() = %+v, want %+v", *e.Metadata(), tt.meta)
			}
			if !reflect.DeepEqual(*e.Metrics(), m) {
				t.Errorf("Metrics() = %+v, want %+v", *e.Metrics(), m)
			}
		})
	}
}

// TestEndpointKey: the no-site forms are GIE's, unchanged; a site comes
// first with a ':'; and triples that the old "/"-joined form mixed up
// (site "a" + name "b" against namespace "a" + name "b", ...) get
// different keys.
func TestEndpointKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		site, namespace, base string
		want                  string
	}{
		{name: "name only (GIE)", base: "vllm-0", want: "vllm-0"},
		{name: "namespace and name (GIE)", namespace: "inference", base: "vllm-0", want: "inference/vllm-0"},
		{name: "site and name", site: "eu-west", base: "vllm-0", want: "eu-west:vllm-0"},
		{name: "site, namespace and name", site: "eu-west", namespace: "inference", base: "vllm-0", want: "eu-west:inference/vllm-0"},
		{name: "site a name b", site: "a", base: "b", want: "a:b"},
		{name: "namespace a name b", namespace: "a", base: "b", want: "a/b"},
		{name: "site a namespace b name c", site: "a", namespace: "b", base: "c", want: "a:b/c"},
		{name: "namespace a name b.c", namespace: "a", base: "b.c", want: "a/b.c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := scheduling.EndpointKey(tt.site, tt.namespace, tt.base); got != tt.want {
				t.Errorf("EndpointKey(%q, %q, %q) = %q, want %q", tt.site, tt.namespace, tt.base, got, tt.want)
			}
		})
	}

	// Every distinct (site, namespace, name) over a small alphabet of
	// valid parts gets its own key.
	parts := []string{"", "a", "b", "a-b"}
	names := []string{"a", "b", "a-b", "a.b"}
	seen := map[string][3]string{}
	for _, site := range parts {
		for _, ns := range parts {
			for _, n := range names {
				k := scheduling.EndpointKey(site, ns, n)
				if prev, dup := seen[k]; dup {
					t.Errorf("EndpointKey(%q, %q, %q) = %q, also the key of %q", site, ns, n, k, prev)
				}
				seen[k] = [3]string{site, ns, n}
			}
		}
	}
}

func TestResultTargets(t *testing.T) {
	t.Parallel()
	eps := namedEndpoints("a", "b", "c")
	ok := &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{eps[1], eps[2]}}
	other := &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{eps[0]}}
	tests := []struct {
		name string
		res  *scheduling.Result
		want []string
	}{
		{name: "nil result", res: nil},
		{name: "no profile results", res: &scheduling.Result{PrimaryProfile: "p"}},
		{name: "primary failed", res: &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{"p": nil, "q": other}}},
		{name: "primary missing", res: &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{"q": other}}},
		{name: "no primary named", res: &scheduling.Result{ProfileResults: map[string]*scheduling.ProfileResult{"q": other}}},
		{name: "primary with fallbacks", res: &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{"p": ok, "q": other}}, want: []string{"b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.res.Targets()
			if tt.want == nil {
				if got != nil {
					t.Errorf("Targets() = %v, want nil", got)
				}
				return
			}
			if names := schedulingtest.Names(got); !reflect.DeepEqual(names, tt.want) {
				t.Errorf("Targets() = %q, want %q", names, tt.want)
			}
		})
	}
}

func TestTypedNameString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tn   scheduling.TypedName
		want string
	}{
		{scheduling.TypedName{Type: "queue-scorer"}, "queue-scorer"},
		{scheduling.TypedName{Type: "queue-scorer", Name: "queue-scorer"}, "queue-scorer"},
		{scheduling.TypedName{Type: "queue-scorer", Name: "tenant-a"}, "tenant-a (queue-scorer)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.tn.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRequestHeader(t *testing.T) {
	t.Parallel()
	req := &scheduling.Request{Headers: map[string]string{"x-request-id": "abc"}}
	if got := req.Header("x-request-id"); got != "abc" {
		t.Errorf("Header(x-request-id) = %q", got)
	}
	if got := req.Header("missing"); got != "" {
		t.Errorf("Header(missing) = %q", got)
	}
	if got := (&scheduling.Request{}).Header("x"); got != "" {
		t.Errorf("Header on nil headers = %q", got)
	}
}
