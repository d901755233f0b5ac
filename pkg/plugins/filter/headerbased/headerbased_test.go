package headerbased

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, schedulingtest.NoParamsCases())
}

func TestFilter(t *testing.T) {
	eps := []*scheduling.Endpoint{
		schedulingtest.Endpoint("a").Address("127.0.0.1").Port(8000).Build(),
		schedulingtest.Endpoint("b-rank-0").Address("127.0.0.2").Port(8000).Build(),
		schedulingtest.Endpoint("b-rank-1").Address("127.0.0.2").Port(8001).Build(),
		schedulingtest.Endpoint("c").Address("127.0.0.3").Port(8000).Build(),
		schedulingtest.Endpoint("v6").Address("::1").Port(3000).Build(),
		schedulingtest.Endpoint("v6-bracketed").Address("[::2]").Port(3000).Build(),
	}
	tests := []struct {
		name    string
		headers map[string]string
		want    []string
	}{
		{name: "no header keeps nothing", headers: nil, want: nil},
		{name: "blank header keeps nothing", headers: map[string]string{Header: "  "}, want: nil},
		{name: "one address", headers: map[string]string{Header: "127.0.0.1"}, want: []string{"a"}},
		{name: "an address keeps every port", headers: map[string]string{Header: "127.0.0.2"}, want: []string{"b-rank-0", "b-rank-1"}},
		{name: "address and port", headers: map[string]string{Header: "127.0.0.2:8001"}, want: []string{"b-rank-1"}},
		{name: "wrong port", headers: map[string]string{Header: "127.0.0.1:9999"}, want: nil},
		{name: "unknown address", headers: map[string]string{Header: "127.0.0.9"}, want: nil},
		{
			name: "list with blanks and spaces", headers: map[string]string{Header: " 127.0.0.3 , ,127.0.0.2:8000,"},
			want: []string{"b-rank-0", "c"},
		},
		{name: "input order, not header order", headers: map[string]string{Header: "127.0.0.3,127.0.0.1"}, want: []string{"a", "c"}},
		{name: "duplicates kept once", headers: map[string]string{Header: "127.0.0.1,127.0.0.1:8000,127.0.0.1"}, want: []string{"a"}},
		{name: "bad port ignored", headers: map[string]string{Header: "127.0.0.1:http,127.0.0.3"}, want: []string{"c"}},
		{name: "port not in plain decimal matches nothing, as in GIE", headers: map[string]string{Header: "127.0.0.1:08000,127.0.0.2:+8000,127.0.0.3:-1"}, want: nil},
		{name: "IPv6 bare", headers: map[string]string{Header: "::1"}, want: []string{"v6"}},
		{name: "IPv6 bracketed", headers: map[string]string{Header: "[::1]"}, want: []string{"v6"}},
		{name: "IPv6 with port", headers: map[string]string{Header: "[::1]:3000"}, want: []string{"v6"}},
		{name: "IPv6 endpoint stored in brackets", headers: map[string]string{Header: "::2,[::2]:3000"}, want: []string{"v6-bracketed"}},
		{name: "IPv6 wrong port", headers: map[string]string{Header: "[::1]:3001"}, want: nil},
		{name: "other headers ignored", headers: map[string]string{"x-test": "127.0.0.1"}, want: nil},
	}
	f, err := New("", Params{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(eps)
			got := f.Filter(t.Context(), &scheduling.Request{Headers: tt.headers}, in)
			if names := schedulingtest.Names(got); !slices.Equal(names, tt.want) {
				t.Errorf("kept %v, want %v", names, tt.want)
			}
			if !slices.Equal(in, eps) {
				t.Error("Filter modified its input")
			}
		})
	}
	if got := f.Filter(t.Context(), nil, eps); len(got) != 0 {
		t.Errorf("nil request: kept %v", schedulingtest.Names(got))
	}
}

// TestDifferencesFromGIE pins the two documented differences from GIE
// v1.5's filter (see the README): every endpoint the header names is kept,
// several per address included, and in candidate order, not header order.
func TestDifferencesFromGIE(t *testing.T) {
	// Two data-parallel ranks on one address, listed in reverse port order.
	eps := []*scheduling.Endpoint{
		schedulingtest.Endpoint("x").Address("127.0.0.1").Port(8000).Build(),
		schedulingtest.Endpoint("rank-0").Address("127.0.0.2").Port(8000).Build(),
		schedulingtest.Endpoint("rank-1").Address("127.0.0.2").Port(8001).Build(),
		schedulingtest.Endpoint("y").Address("127.0.0.3").Port(8000).Build(),
	}
	tests := []struct {
		name   string
		header string
		want   []string
		gie    []string // what GIE v1.5 keeps, for the record
	}{
		{
			name:   "a bare address keeps every endpoint at it",
			header: "127.0.0.2",
			want:   []string{"rank-0", "rank-1"},
			gie:    []string{"rank-1"}, // the last candidate at the address
		},
		{
			name:   "two ports of one address keep both",
			header: "127.0.0.2:8001,127.0.0.2:8000",
			want:   []string{"rank-0", "rank-1"},
			gie:    []string{"rank-1"}, // one per address: the first entry that matches
		},
		{
			name:   "candidate order, not header order",
			header: "127.0.0.3,127.0.0.2:8001,127.0.0.1",
			want:   []string{"x", "rank-1", "y"},
			gie:    []string{"y", "rank-1", "x"},
		},
	}
	f, err := New(Type, Params{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := f.Filter(t.Context(), &scheduling.Request{Headers: map[string]string{Header: tt.header}}, eps)
			if names := schedulingtest.Names(got); !slices.Equal(names, tt.want) {
				t.Errorf("kept %v, want %v (GIE v1.5 keeps %v)", names, tt.want, tt.gie)
			}
		})
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"### Differences from GIE", "A bare address keeps every endpoint", "candidate order", "TestDifferencesFromGIE"} {
		if !strings.Contains(string(readme), s) {
			t.Errorf("README does not say %q", s)
		}
	}
}

// TestProfileRun checks that a request without the header fails the
// profile with ErrNoEndpoints.
func TestProfileRun(t *testing.T) {
	f, err := New(Type, Params{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := scheduling.NewProfile("default", []scheduling.Filter{f}, nil, &schedulingtest.FakePicker{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := schedulingtest.Endpoints(4, nil)
	if _, err := prof.Run(t.Context(), &scheduling.Request{}, eps); err == nil {
		t.Error("profile ran without the header")
	}
	res, err := prof.Run(t.Context(), &scheduling.Request{Headers: map[string]string{Header: eps[2].HostPort()}}, eps)
	if err != nil {
		t.Fatal(err)
	}
	if got := schedulingtest.Names(res.Targets); !slices.Equal(got, []string{"ep-2"}) {
		t.Errorf("targets = %v, want [ep-2]", got)
	}
}

// TestFilterLongList checks a header longer than the linear-scan limit.
func TestFilterLongList(t *testing.T) {
	eps := schedulingtest.Endpoints(100, nil)
	var items, want []string
	for i := 0; i < 100; i += 3 {
		item := eps[i].Metadata().Address
		if i%2 == 0 {
			item = eps[i].HostPort()
		}
		items = append(items, item)
		want = append(want, eps[i].Name())
	}
	items = append(items, "127.0.0.250:1") // matches nothing
	f, err := New(Type, Params{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := f.Filter(t.Context(), &scheduling.Request{Headers: map[string]string{Header: strings.Join(items, ",")}}, eps)
	if names := schedulingtest.Names(got); !slices.Equal(names, want) {
		t.Errorf("kept %v, want %v", names, want)
	}
}
