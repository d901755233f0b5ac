package metricssource

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		raw      string
		want     Params
		wantErrs []string
	}{
		{name: "no parameters gives the defaults", want: Params{Scheme: "http", Path: "/metrics", InsecureSkipVerify: true, NameFilter: true}},
		{name: "null parameters", raw: `null`, want: Params{Scheme: "http", Path: "/metrics", InsecureSkipVerify: true, NameFilter: true}},
		{name: "every field set", raw: `{"scheme": "https", "path": "/custom/metrics", "insecureSkipVerify": false, "nameFilter": false}`, want: Params{Scheme: "https", Path: "/custom/metrics", InsecureSkipVerify: false}},
		{name: "root path", raw: `{"path": "/"}`, want: Params{Scheme: "http", Path: "/", InsecureSkipVerify: true, NameFilter: true}},
		{name: "name filter not a boolean", raw: `{"nameFilter": "on"}`, wantErrs: []string{"nameFilter: expected a boolean"}},
		{name: "unknown key", raw: `{"port": 9090}`, wantErrs: []string{`unknown field "port"`}},
		{name: "wrong type", raw: `{"insecureSkipVerify": "yes"}`, wantErrs: []string{"insecureSkipVerify: expected a boolean"}},
		{name: "unknown scheme", raw: `{"scheme": "grpc"}`, wantErrs: []string{`scheme: must be "http" or "https", got "grpc"`}},
		{name: "upper-case scheme", raw: `{"scheme": "HTTP"}`, wantErrs: []string{`scheme: must be "http" or "https", got "HTTP"`}},
		{name: "empty scheme", raw: `{"scheme": ""}`, wantErrs: []string{`scheme: must be "http" or "https", got ""`}},
		{name: "relative path", raw: `{"path": "metrics"}`, wantErrs: []string{`path: must start with "/", got "metrics"`}},
		{name: "empty path", raw: `{"path": ""}`, wantErrs: []string{`path: must start with "/", got ""`}},
		{name: "path with query", raw: `{"path": "/metrics?format=text"}`, wantErrs: []string{"path: must be a path without query or fragment"}},
		{name: "path with space", raw: `{"path": "/my metrics"}`, wantErrs: []string{"path: must not contain spaces or control characters"}},
		{name: "every problem is reported", raw: `{"scheme": "ftp", "path": "x"}`, wantErrs: []string{"scheme: must be", "path: must start with"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var raw json.RawMessage
			if tt.raw != "" {
				raw = json.RawMessage(tt.raw)
			}
			p, err := Registration.Factory("src", raw, schedulingtest.NewHandle(t))
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				s := p.(*Source)
				if got := s.Settings(); got != tt.want {
					t.Errorf("Settings() = %+v, want %+v", got, tt.want)
				}
				if got := s.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "src"}) {
					t.Errorf("TypedName() = %v", got)
				}
				return
			}
			if err == nil {
				t.Fatalf("want errors %q, got none", tt.wantErrs)
			}
			leaves := scheduling.Errors(err)
			if len(leaves) != len(tt.wantErrs) {
				t.Fatalf("got %d errors %q, want %d", len(leaves), err, len(tt.wantErrs))
			}
			for i, want := range tt.wantErrs {
				if !strings.Contains(leaves[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, leaves[i], want)
				}
			}
		})
	}
}

func TestIsDataSource(t *testing.T) {
	t.Parallel()
	p, err := Registration.Factory("src", nil, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(scheduling.DataSource); !ok {
		t.Errorf("%T is not a scheduling.DataSource", p)
	}
}
