package relay

import (
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeConfig: arbitrary documents never panic; a refusal is a
// *ValidationError whose problems each have a message; an accepted
// document defaults and validates without panicking, and validation
// errors name a field.
func FuzzDecodeConfig(f *testing.F) {
	f.Add([]byte("site: a\ncluster: c\nproviders: [{name: p}]\n"))
	f.Add([]byte("providers: [{name: p, metricsConfig: {endpoint: 'http://10-0-0-1.ns.pod:1', staleMetricsSeconds: 9e9}}]\n"))
	f.Add([]byte("peers: [{site: b, address: 'https://[::1]:1', identity: {sha256: zz}}]\nscrapeInterval: 1ns\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("---\n---\nsite: x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Decode(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("not a ValidationError: %T %v", err, err)
			}
			for _, fe := range ve.Errors {
				if fe.Msg == "" {
					t.Fatalf("a problem without a message: %+v", fe)
				}
			}
			return
		}
		cfg.SetDefaults()
		if _, err := cfg.Validate(); err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("not a ValidationError: %T", err)
			}
			for _, fe := range ve.Errors {
				if fe.Path == "" || strings.ContainsAny(fe.Path, "\n") {
					t.Fatalf("a validation problem without a clean path: %+v", fe)
				}
			}
		}
	})
}
