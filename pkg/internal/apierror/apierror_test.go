package apierror_test

import (
	"encoding/json"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/internal/apierror"
)

func TestJSON(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{
			name: "status code",
			got:  apierror.JSON("the body is not valid JSON", "BadRequest", 400),
			want: `{"error":{"message":"the body is not valid JSON","type":"BadRequest","param":null,"code":400}}`,
		},
		{
			name: "reason code",
			got:  apierror.JSON("no route", "invalid_request_error", "no_route"),
			want: `{"error":{"message":"no route","type":"invalid_request_error","param":null,"code":"no_route"}}`,
		},
		{
			name: "escaping",
			got:  apierror.JSON("a \"quoted\" <tag> & \n", "server_error", "internal"),
			want: `{"error":{"message":"a \"quoted\" \u003ctag\u003e \u0026 \n","type":"server_error","param":null,"code":"internal"}}`,
		},
		{
			name: "invalid UTF-8",
			got:  apierror.JSON("bad \xff byte", "Internal", 500),
			want: `{"error":{"message":"bad \ufffd byte","type":"Internal","param":null,"code":500}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Fatalf("got  %s\nwant %s", tt.got, tt.want)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	var e apierror.Envelope[string]
	if err := json.Unmarshal(apierror.JSON("m", "t", "c"), &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Message != "m" || e.Error.Type != "t" || e.Error.Code != "c" || e.Error.Param != nil {
		t.Fatalf("decoded %+v", e)
	}
}

func BenchmarkJSON(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		apierror.JSON("no endpoint is ready to serve the request", "ServiceUnavailable", 503)
	}
}
