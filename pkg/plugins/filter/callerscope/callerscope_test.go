package callerscope

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, append([]schedulingtest.FactoryCase{
		{Name: "defaults", Check: func(t *testing.T, p scheduling.Plugin) {
			f := p.(*Filter)
			if f.header != DefaultCallerHeader || !f.fallback.all || len(f.callers) != 0 {
				t.Errorf("defaults: header %q, fallback all %v", f.header, f.fallback.all)
			}
		}},
		{Name: "full", Params: `{"callerHeader": "x-api-key-id", "internalCallers": ["batch"],
			"callers": {"team-a": {"allowedEndpoints": ["a", "ns/b"]}, "team-b": {"allowedSelector": {"matchLabels": {"tier": "gold"}}}},
			"defaultAllowed": {"allowedEndpoints": []}}`},
		{Name: "every problem", Params: `{"callerHeader": "X-Caller", "internalCallers": ["", "x", "x"],
			"callers": {"": {"allowedEndpoints": ["*"]}, "none": {}, "bad": {"allowedEndpoints": [""], "allowedSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}},
			"defaultAllowed": {"allowedSelector": {"matchLabels": {"bad key": "v"}}}}`,
			WantErrs: []string{
				`callerHeader: "X-Caller": write header names in lower case`,
				`callers[""]: must not be empty`,
				`callers["bad"].allowedEndpoints[0]: must not be empty`,
				`callers["bad"].allowedSelector.matchExpressions[0].values: Required value`,
				`callers["none"]: give allowedEndpoints or allowedSelector`,
				"internalCallers[0]: must not be empty",
				`internalCallers[2]: "x" is also internalCallers[1]`,
				`defaultAllowed.allowedSelector.matchLabels: Invalid value: "bad key"`,
			}},
		{Name: "bad header", Params: `{"callerHeader": "x caller"}`, WantErr: `callerHeader: "x caller" is not a valid header name`},
		{Name: "misspelled scope key", Params: `{"callers": {"a": {"allowedEndpoint": ["x"]}}}`, WantErr: `unknown field "callers.a.allowedEndpoint"`},
	}, schedulingtest.DecodeErrorCases()...))
}

func newFilter(t testing.TB, params string) *Filter {
	t.Helper()
	pl, err := Registration.Factory("scope", []byte(params), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return pl.(*Filter)
}

func pool() []*scheduling.Endpoint {
	return []*scheduling.Endpoint{
		schedulingtest.Endpoint("a").Port(1).Label("tier", "gold").Build(),
		schedulingtest.Endpoint("b").Namespace("ns").Port(2).Build(),
		schedulingtest.Endpoint("c").Port(3).Label("tier", "gold").Internal().Build(),
		schedulingtest.Endpoint("d").Port(4).Internal().Build(),
	}
}

func TestFilter(t *testing.T) {
	const params = `{"internalCallers": ["batch", "ops"],
		"callers": {
			"team-a": {"allowedEndpoints": ["a", "ns/b", "c"]},
			"gold":   {"allowedSelector": {"matchLabels": {"tier": "gold"}}},
			"batch":  {"allowedEndpoints": ["d"], "allowedSelector": {"matchLabels": {"tier": "gold"}}},
			"nobody": {"allowedEndpoints": ["zz"]}
		}}`
	tests := []struct {
		caller  string // "" = no header
		keep    []string
		refused bool
	}{
		{caller: "", keep: []string{"a", "b"}},              // defaultAllowed: every non-internal endpoint
		{caller: "stranger", keep: []string{"a", "b"}},      // unknown caller: the same
		{caller: "team-a", keep: []string{"a", "b"}},        // c is named but internal
		{caller: "gold", keep: []string{"a"}},               // the selector; c is internal
		{caller: "batch", keep: []string{"a", "c", "d"}},    // internal caller: names or selector, internal included
		{caller: "ops", keep: []string{"a", "b", "c", "d"}}, // internal caller without scope: defaultAllowed, internal included
		{caller: "nobody", keep: nil, refused: true},        // its scope matches nothing
	}
	f := newFilter(t, params)
	eps := pool()
	for _, tt := range tests {
		t.Run("caller="+tt.caller, func(t *testing.T) {
			req := &scheduling.Request{Headers: map[string]string{}}
			if tt.caller != "" {
				req.Headers[DefaultCallerHeader] = tt.caller
			}
			kept := f.Filter(context.Background(), req, eps)
			if got := strings.Join(schedulingtest.Names(kept), ","); got != strings.Join(tt.keep, ",") {
				t.Errorf("kept %s, want %v", got, tt.keep)
			}
			r := f.Admit(context.Background(), req, eps)
			if (r != nil) != tt.refused {
				t.Fatalf("Admit = %+v, want refused=%v", r, tt.refused)
			}
			if r != nil && (r.StatusCode != http.StatusForbidden || r.Reason != ReasonCallerNotAllowed ||
				r.Message != `caller "nobody" may use none of the 4 endpoints that can serve the request`) {
				t.Errorf("refusal = %+v", r)
			}
		})
	}
}

// defaultAllowed {allowedEndpoints: []} refuses unknown callers and
// requests without the header; a configured header name is read.
func TestDefaultAllowedAndHeader(t *testing.T) {
	f := newFilter(t, `{"callerHeader": "x-tenant", "callers": {"t1": {"allowedEndpoints": ["*"]}}, "defaultAllowed": {"allowedEndpoints": []}}`)
	eps := pool()
	r := f.Admit(context.Background(), &scheduling.Request{Headers: map[string]string{DefaultCallerHeader: "t1"}}, eps)
	if r == nil || r.Message != "a request without the x-tenant header may use none of the 4 endpoints that can serve the request" {
		t.Errorf("refusal = %+v", r)
	}
	req := &scheduling.Request{Headers: map[string]string{"x-tenant": "t1"}}
	if r := f.Admit(context.Background(), req, eps); r != nil {
		t.Errorf("t1 refused: %+v", r)
	}
	if kept := f.Filter(context.Background(), req, eps); len(kept) != 2 {
		t.Errorf("t1 kept %v, want the two non-internal endpoints", schedulingtest.Names(kept))
	}
	// A selector-only default replaces the default, it does not add to it.
	g := newFilter(t, `{"defaultAllowed": {"allowedSelector": {"matchLabels": {"tier": "gold"}}}}`)
	if kept := g.Filter(context.Background(), &scheduling.Request{}, eps); strings.Join(schedulingtest.Names(kept), ",") != "a" {
		t.Errorf("kept %v, want [a]", schedulingtest.Names(kept))
	}
}

// The common case — every endpoint allowed, none internal — costs no
// allocation and returns the input.
func TestFastPath(t *testing.T) {
	f := newFilter(t, "")
	eps := schedulingtest.Endpoints(100, nil)
	req := &scheduling.Request{Headers: map[string]string{DefaultCallerHeader: "x"}}
	allocs := testing.AllocsPerRun(100, func() {
		if f.Admit(context.Background(), req, eps) != nil || len(f.Filter(context.Background(), req, eps)) != 100 {
			t.Fatal("filtered")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations, want 0", allocs)
	}
}

// TestAdmitJudgesThePool: a caller whose allowed endpoints are all out of
// rotation (not candidates) gets 503 scope_unavailable, not 403; one that
// may use no endpoint of the pool still gets 403.
func TestAdmitJudgesThePool(t *testing.T) {
	const params = `{"internalCallers": ["batch"], "callers": {
		"team-a": {"allowedEndpoints": ["a"]},
		"batch":  {"allowedEndpoints": ["d"]},
		"nobody": {"allowedEndpoints": ["zz"]}}}`
	all := pool()
	cands := all[1:2] // b, the only routable endpoint
	tests := []struct {
		caller string
		run    bool // the host runs the plugin (it sees the pool)
		status int  // 0: admitted
		reason string
	}{
		{caller: "stranger", run: true},
		{caller: "team-a", run: true, status: http.StatusServiceUnavailable, reason: ReasonScopeUnavailable},
		{caller: "batch", run: true, status: http.StatusServiceUnavailable, reason: ReasonScopeUnavailable}, // d is internal, batch may use it
		{caller: "nobody", run: true, status: http.StatusForbidden, reason: ReasonCallerNotAllowed},
		{caller: "team-a", status: http.StatusForbidden, reason: ReasonCallerNotAllowed}, // no pool: the candidates stand for it
	}
	for _, tt := range tests {
		t.Run(tt.caller, func(t *testing.T) {
			f := newFilter(t, params)
			if tt.run {
				schedulingtest.RunWithPool(t, f, all)
			}
			r := f.Admit(context.Background(), &scheduling.Request{Headers: map[string]string{DefaultCallerHeader: tt.caller}}, cands)
			if tt.status == 0 {
				if r != nil {
					t.Fatalf("refused: %+v", r)
				}
				return
			}
			if r == nil || r.StatusCode != tt.status || r.Reason != tt.reason {
				t.Fatalf("refusal = %+v, want %d %s", r, tt.status, tt.reason)
			}
			if strings.Contains(r.Message, `"a"`) || strings.Contains(r.Message, `"d"`) {
				t.Errorf("the message names endpoints: %s", r.Message)
			}
		})
	}
	// An external caller whose only allowed endpoint is internal may use
	// nothing in the pool: 403.
	f := newFilter(t, `{"callers": {"ext": {"allowedEndpoints": ["d"]}}}`)
	schedulingtest.RunWithPool(t, f, all)
	if r := f.Admit(context.Background(), &scheduling.Request{Headers: map[string]string{DefaultCallerHeader: "ext"}}, cands); r == nil || r.StatusCode != http.StatusForbidden {
		t.Errorf("refusal = %+v, want 403", r)
	}
}
