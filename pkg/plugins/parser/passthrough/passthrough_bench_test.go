package passthrough

import (
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// The plugin does no per-request work (the server's request parser does).
// These benchmarks measure its only code: building it from configuration,
// and the Format call the server makes once when it loads the
// configuration.

func BenchmarkFactory(b *testing.B) {
	h := schedulingtest.NewHandle(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Registration.Factory(Type, nil, h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFormat(b *testing.B) {
	p, err := New(Type, Params{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	var parser scheduling.Parser = p
	b.ReportAllocs()
	for b.Loop() {
		if parser.Format() == "" {
			b.Fatal("empty format")
		}
	}
}
