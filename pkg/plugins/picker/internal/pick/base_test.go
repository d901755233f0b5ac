package pick

import (
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestNewBase(t *testing.T) {
	b, err := NewBase("x-picker", "", Params{MaxNumOfEndpoints: 2}, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if tn := b.TypedName(); tn.Type != "x-picker" || tn.Name != "x-picker" || b.Max != 2 || b.Rng == nil {
		t.Errorf("base = %+v %+v, want name defaulted to the type, max 2, a random source", tn, b)
	}
	if _, err := NewBase("x-picker", "p", Params{MaxNumOfEndpoints: 0}, schedulingtest.NewHandle(t)); err == nil || !strings.Contains(err.Error(), "maxNumOfEndpoints") {
		t.Errorf("invalid params: err = %v", err)
	}
	if _, err := NewBase("x-picker", "p", DefaultParams(), nil); err == nil || !strings.Contains(err.Error(), "x-picker: nil handle") {
		t.Errorf("nil handle: err = %v", err)
	}
}
