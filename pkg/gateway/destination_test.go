package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestParseEndpointList(t *testing.T) {
	for _, tc := range []struct {
		in         string
		valid, bad []string
	}{
		{in: ""},
		{in: "127.0.0.1:8000", valid: []string{"127.0.0.1:8000"}},
		{in: " 127.0.0.1:8000 , ,127.0.0.2:8001,", valid: []string{"127.0.0.1:8000", "127.0.0.2:8001"}},
		{in: "[::1]:8000,127.0.0.1:8000,[::1]:8000", valid: []string{"[::1]:8000", "127.0.0.1:8000"}},
		{in: "localhost:8000,127.0.0.1,127.0.0.1:0,0.0.0.0:80,127.0.0.1:70000,::1:80,[fe80::1%eth0]:80", bad: []string{"localhost:8000", "127.0.0.1", "127.0.0.1:0", "0.0.0.0:80", "127.0.0.1:70000", "::1:80", "[fe80::1%eth0]:80"}},
	} {
		valid, bad := parseEndpointList(tc.in)
		if diff := cmp.Diff(tc.valid, valid); diff != "" {
			t.Errorf("parseEndpointList(%q) valid (-want +got):\n%s", tc.in, diff)
		}
		if diff := cmp.Diff(tc.bad, bad); diff != "" {
			t.Errorf("parseEndpointList(%q) invalid (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestDestinationFromMetadata(t *testing.T) {
	lb := func(v *structpb.Value) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{
			LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{DestinationHeader: v}}),
		}}
	}
	list, _ := structpb.NewList([]any{"127.0.0.1:1", 5.0, "127.0.0.2:2"})
	for _, tc := range []struct {
		name   string
		md     *structpb.Struct
		want   string
		wantOK bool
	}{
		{name: "nil"},
		{name: "other namespace", md: &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewStringValue("y")}}},
		{name: "namespace not a struct", md: &structpb.Struct{Fields: map[string]*structpb.Value{LBNamespace: structpb.NewStringValue("y")}}},
		{name: "string", md: lb(structpb.NewStringValue("127.0.0.1:1,127.0.0.2:2")), want: "127.0.0.1:1,127.0.0.2:2", wantOK: true},
		{name: "list of strings", md: lb(structpb.NewListValue(list)), want: "127.0.0.1:1,127.0.0.2:2", wantOK: true},
		{name: "number", md: lb(structpb.NewNumberValue(3))},
		{name: "null value", md: lb(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := destinationFromMetadata(tc.md)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("got %q %v, want %q %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseSubsetHint(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{in: nil},
		{in: []string{" , ,"}},
		{in: []string{"127.0.0.1:1, 127.0.0.2", "127.0.0.3:3"}, want: []string{"127.0.0.1:1", "127.0.0.2", "127.0.0.3:3"}},
	} {
		if diff := cmp.Diff(tc.want, parseSubsetHint(tc.in)); diff != "" {
			t.Errorf("parseSubsetHint(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}
