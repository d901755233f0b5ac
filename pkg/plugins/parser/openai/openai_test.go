package openai

import (
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestParams(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, schedulingtest.NoParamsCases())
}

func TestFormat(t *testing.T) {
	t.Parallel()
	p, err := Registration.Factory(Type, nil, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	parser, ok := p.(scheduling.Parser)
	if !ok {
		t.Fatalf("%T is not a scheduling.Parser", p)
	}
	if got := parser.Format(); got != "openai" {
		t.Errorf("Format() = %q, want %q", got, "openai")
	}
	if got := p.TypedName().String(); got != "openai-parser" {
		t.Errorf("TypedName().String() = %q", got)
	}
}
