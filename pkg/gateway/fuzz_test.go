package gateway

import (
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzParseEndpointList: every accepted entry is a dialable ip:port that
// appears in the input, entries are unique, and nothing non-blank is lost.
func FuzzParseEndpointList(f *testing.F) {
	for _, s := range []string{"", "127.0.0.1:8000", "127.0.0.1:8000,[::1]:9000", " a , ,127.0.0.1:0,", "[fe80::1%eth0]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		valid, invalid := parseEndpointList(s)
		seen := map[string]bool{}
		for _, v := range valid {
			if err := checkEndpoint(v); err != nil {
				t.Fatalf("accepted %q: %v", v, err)
			}
			if seen[v] || !strings.Contains(s, v) || strings.ContainsAny(v, ", \t") {
				t.Fatalf("entry %q duplicated, invented or not trimmed", v)
			}
			seen[v] = true
		}
		for _, v := range invalid {
			if checkEndpoint(v) == nil || v == "" {
				t.Fatalf("rejected valid or empty entry %q", v)
			}
		}
	})
}

// FuzzParseSubsetHint: entries are trimmed, non-empty and comma-free.
func FuzzParseSubsetHint(f *testing.F) {
	for _, s := range []string{"", "127.0.0.1:1, 127.0.0.2:2", ",,, ,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, e := range parseSubsetHint([]string{s}) {
			if e == "" || strings.Contains(e, ",") || strings.TrimSpace(e) != e {
				t.Fatalf("bad entry %q from %q", e, s)
			}
		}
		_ = subsetStruct(parseSubsetHint([]string{s}))
	})
}

// FuzzApplyHeaderMutation decodes arbitrary bytes as an ext_proc
// ProcessingResponse (so header mutations and dynamic metadata both get
// exercised) and applies them: no panic, and whatever is applied leaves only
// valid, canonical header names and values the transport can send.
func FuzzApplyHeaderMutation(f *testing.F) {
	seed := func(m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: DestinationHeader, RawValue: []byte("127.0.0.1:8000")}},
				{Header: &corev3.HeaderValue{Key: "x-a", Value: "v"}, Append: wrapperspb.Bool(true)},
				{Header: &corev3.HeaderValue{Key: ":path", RawValue: []byte("/v2")}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS},
			},
			RemoveHeaders: []string{"x-b", ":path", "host"},
		}},
	}}, DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{DestinationHeader: structpb.NewStringValue("127.0.0.1:8000")}}),
	}}})
	seed(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: ":status", RawValue: []byte("429")}}},
		}},
	}}})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m extprocv3.ProcessingResponse
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		_, _ = destinationFromMetadata(m.GetDynamicMetadata())
		var mut *extprocv3.HeaderMutation
		target := targetRequest
		switch v := m.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_RequestHeaders:
			mut = v.RequestHeaders.GetResponse().GetHeaderMutation()
		case *extprocv3.ProcessingResponse_ResponseHeaders:
			mut, target = v.ResponseHeaders.GetResponse().GetHeaderMutation(), targetResponse
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			mut, target = v.ImmediateResponse.GetHeaders(), targetImmediate
		default:
			return
		}
		h := http.Header{"X-A": {"1"}, "Host": {"h"}}
		var ps pseudoMutations
		if err := applyHeaderMutation(h, mut, target, &ps); err != nil {
			return
		}
		if h.Get("Host") != "h" && target != targetImmediate {
			t.Fatalf("host changed to %q", h.Get("Host"))
		}
		for k, vs := range h {
			if !validHeaderName(k) || k != http.CanonicalHeaderKey(k) {
				t.Fatalf("bad header name %q", k)
			}
			for _, v := range vs {
				if !validHeaderValue(v) {
					t.Fatalf("bad value %q for %q", v, k)
				}
			}
		}
		if ps.path != "" && ps.path[0] != '/' && ps.path != "*" {
			t.Fatalf("bad :path %q", ps.path)
		}
		if ps.status != 0 && (ps.status < 200 || ps.status > 999) {
			t.Fatalf("bad :status %d", ps.status)
		}
	})
}
