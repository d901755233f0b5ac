package gateway

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestApplyHeaderMutation(t *testing.T) {
	opt := func(k, v string, action corev3.HeaderValueOption_HeaderAppendAction, appendFlag *bool) *corev3.HeaderValueOption {
		o := &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, AppendAction: action}
		if appendFlag != nil {
			o.Append = wrapperspb.Bool(*appendFlag)
		}
		return o
	}
	yes, no := true, false
	for _, tc := range []struct {
		name       string
		target     mutationTarget
		in         http.Header
		mut        *extprocv3.HeaderMutation
		want       http.Header
		wantPseudo pseudoMutations
		wantErr    string
	}{
		{
			name: "nil mutation", in: http.Header{"A": {"1"}}, want: http.Header{"A": {"1"}},
		},
		{
			name: "default action overwrites (append defaults to false in ext_proc)",
			in:   http.Header{"X-A": {"1", "2"}},
			mut:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "3", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, nil)}},
			want: http.Header{"X-A": {"3"}},
		},
		{
			name: "deprecated append=true appends",
			in:   http.Header{"X-A": {"1"}},
			mut:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "2", 0, &yes)}},
			want: http.Header{"X-A": {"1", "2"}},
		},
		{
			name: "deprecated append=false overwrites",
			in:   http.Header{"X-A": {"1"}},
			mut:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "2", 0, &no)}},
			want: http.Header{"X-A": {"2"}},
		},
		{
			name: "ADD_IF_ABSENT adds only when absent",
			in:   http.Header{"X-A": {"1"}},
			mut: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				opt("x-a", "2", corev3.HeaderValueOption_ADD_IF_ABSENT, nil),
				opt("x-b", "3", corev3.HeaderValueOption_ADD_IF_ABSENT, nil),
			}},
			want: http.Header{"X-A": {"1"}, "X-B": {"3"}},
		},
		{
			name: "OVERWRITE_IF_EXISTS only when present",
			in:   http.Header{"X-A": {"1"}},
			mut: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				opt("x-a", "2", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS, nil),
				opt("x-b", "3", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS, nil),
			}},
			want: http.Header{"X-A": {"2"}},
		},
		{
			name: "OVERWRITE_IF_EXISTS_OR_ADD wins over append=true",
			in:   http.Header{"X-A": {"1"}},
			mut:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "2", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD, &yes)}},
			want: http.Header{"X-A": {"2"}},
		},
		{
			name: "value used when raw_value is empty",
			in:   http.Header{},
			mut:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "X-Mixed-Case", Value: "v"}}}},
			want: http.Header{"X-Mixed-Case": {"v"}},
		},
		{
			name:    "value and raw_value both set",
			mut:     &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x", Value: "a", RawValue: []byte("b")}}}},
			wantErr: "only one of value and raw_value",
		},
		{
			name:    "invalid name",
			mut:     &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("bad name", "v", 0, nil)}},
			wantErr: "invalid header name",
		},
		{
			name:    "CRLF in value",
			mut:     &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x", "a\r\nInjected: 1", 0, nil)}},
			wantErr: "invalid header value",
		},
		{
			name:    "unknown append_action",
			mut:     &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x", "v", 42, nil)}},
			wantErr: "invalid append_action 42",
		},
		{
			name:    "invalid remove name",
			mut:     &extprocv3.HeaderMutation{RemoveHeaders: []string{""}},
			wantErr: "remove_headers[0]: invalid header name",
		},
		{
			name: "routing, envoy, hop-by-hop and content-length changes ignored on requests",
			in:   http.Header{"Host": {"h"}, "X-Envoy-Foo": {"1"}, "Content-Length": {"5"}},
			mut: &extprocv3.HeaderMutation{
				SetHeaders: []*corev3.HeaderValueOption{
					opt(":authority", "evil", 0, nil), opt(":method", "DELETE", 0, nil), opt(":scheme", "https", 0, nil),
					opt("host", "evil", 0, nil), opt("x-envoy-foo", "2", 0, nil), opt("connection", "close", 0, nil),
					opt("content-length", "99", 0, nil), opt(":status", "500", 0, nil),
				},
				RemoveHeaders: []string{":path", "host", "x-envoy-foo"},
			},
			want: http.Header{"Host": {"h"}, "X-Envoy-Foo": {"1"}, "Content-Length": {"5"}},
		},
		{
			name:       ":path may change on requests",
			mut:        &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt(":path", "/v2?a=b", 0, nil)}},
			want:       http.Header{},
			wantPseudo: pseudoMutations{path: "/v2?a=b"},
		},
		{
			name:    ":path must be origin-form",
			mut:     &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt(":path", "v2", 0, nil)}},
			wantErr: ":path \"v2\" must start with '/'",
		},
		{
			name:       ":status may change on responses, invalid ignored",
			target:     targetResponse,
			in:         http.Header{"Content-Length": {"5"}},
			mut:        &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt(":status", "abc", 0, nil), opt(":status", "418", 0, nil), opt(":path", "/x", 0, nil), opt("content-length", "7", 0, nil)}},
			want:       http.Header{"Content-Length": {"7"}},
			wantPseudo: pseudoMutations{status: 418},
		},
		{
			name:   "immediate responses may set envoy and host headers, not pseudo-headers",
			target: targetImmediate,
			in:     http.Header{},
			mut:    &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-envoy-ratelimited", "true", 0, nil), opt(":status", "500", 0, nil)}},
			want:   http.Header{"X-Envoy-Ratelimited": {"true"}},
		},
		{
			name: "remove then set, in order",
			in:   http.Header{"X-A": {"1"}, "X-B": {"2"}},
			mut: &extprocv3.HeaderMutation{
				RemoveHeaders: []string{"X-A", "x-b"},
				SetHeaders:    []*corev3.HeaderValueOption{opt("x-a", "new", corev3.HeaderValueOption_ADD_IF_ABSENT, nil), nil, {}},
			},
			want: http.Header{"X-A": {"new"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in
			if h == nil {
				h = http.Header{}
			}
			var ps pseudoMutations
			err := applyHeaderMutation(h, tc.mut, tc.target, &ps)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.want, h); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if ps != tc.wantPseudo {
				t.Errorf("pseudo mutations %+v, want %+v", ps, tc.wantPseudo)
			}
		})
	}
}

func TestUpstreamRequestHeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header http.Header
		remote string
		want   http.Header // X-Request-Id checked separately when absent
	}{
		{
			name:   "hop-by-hop, nominated and Expect headers dropped; XFF set",
			header: http.Header{"Connection": {"keep-alive, X-Hop"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"}, "Te": {"gzip"}, "Expect": {"100-continue"}, "Upgrade": {"h2c"}, "X-Request-Id": {"r"}, "A": {"b"}},
			remote: "127.0.0.1:5555",
			want:   http.Header{"A": {"b"}, "X-Request-Id": {"r"}, "X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Proto": {"http"}},
		},
		{
			name:   "TE: trailers kept, XFF appended",
			header: http.Header{"Te": {"trailers"}, "X-Forwarded-For": {"127.0.0.9", "127.0.0.8"}, "X-Request-Id": {"r"}},
			remote: "[::1]:5555",
			want:   http.Header{"Te": {"trailers"}, "X-Request-Id": {"r"}, "X-Forwarded-For": {"127.0.0.9, 127.0.0.8, ::1"}, "X-Forwarded-Proto": {"http"}},
		},
		{
			name:   "no remote address, request id generated",
			header: http.Header{},
			want:   http.Header{"X-Forwarded-Proto": {"http"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{Header: tc.header, RemoteAddr: tc.remote}
			got := upstreamRequestHeader(r)
			if _, ok := tc.want["X-Request-Id"]; !ok {
				id := got.Get("X-Request-Id")
				if !uuidV4.MatchString(id) {
					t.Errorf("generated x-request-id %q is not a UUIDv4", id)
				}
				delete(got, "X-Request-Id")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if tc.header["Connection"] != nil && r.Header.Get("Connection") == "" {
				t.Error("the client's header map was modified")
			}
		})
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewRequestIDUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newRequestID()
		if !uuidV4.MatchString(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}

func TestHeaderMap(t *testing.T) {
	h := http.Header{"X-B": {"2", "3"}, "Content-Type": {"application/json"}, "X-A": {"1"}, "Xa": {"z"}}
	got := headerMap([]string{":status", "200"}, h)
	want := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":status", RawValue: []byte("200")},
		{Key: "content-type", RawValue: []byte("application/json")},
		{Key: "x-a", RawValue: []byte("1")},
		{Key: "x-b", RawValue: []byte("2")},
		{Key: "x-b", RawValue: []byte("3")},
		{Key: "xa", RawValue: []byte("z")},
	}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("header map (-want +got):\n%s", diff)
	}
}

func TestRequestPath(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		{"/v1/chat?x=1", "/v1/chat?x=1"},
		{"http://example.com/a/b?c", "/a/b?c"},
		{"*", "*"},
	} {
		r, err := http.NewRequest(http.MethodGet, "http://example.com/a/b?c", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.RequestURI = tc.uri
		if got := requestPath(r); got != tc.want {
			t.Errorf("requestPath(%q) = %q, want %q", tc.uri, got, tc.want)
		}
	}
}
