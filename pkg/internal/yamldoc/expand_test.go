package yamldoc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
)

func laughs(levels int) string {
	var b strings.Builder
	b.WriteString("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	return b.String()
}

func TestExpandedSize(t *testing.T) {
	const limit = 1 << 20
	big := strings.Repeat("x", 1000)
	tests := []struct {
		name    string
		in      string
		atLeast int64
		atMost  int64
	}{
		{name: "no alias counts its length", in: "a: [1, 2]\n", atLeast: 10, atMost: 10},
		{name: "a star that is no alias", in: "a: '*x'\n", atLeast: 8, atMost: 8},
		{name: "one alias adds its target", in: "a: &x " + big + "\nb: *x\n", atLeast: 2000, atMost: 2100},
		{name: "aliases of aliases multiply", in: "a: &x " + big + "\nb: &y [*x, *x]\nc: [*y, *y]\n", atLeast: 7000, atMost: 7100},
		{name: "billion laughs saturates", in: laughs(9), atLeast: limit + 1, atMost: limit + 1},
		{name: "self reference terminates", in: "a: &x [1, *x]\n", atLeast: 13, atMost: 20},
		{name: "every document counts", in: "a: &x " + big + "\n---\nb: &y " + big + "\nc: *y\n", atLeast: 3000, atMost: 3100},
		{name: "syntax error counts its length", in: "a: [*x\n", atLeast: 7, atMost: 7},
		{name: "too long to start with", in: strings.Repeat("#", limit+5), atLeast: limit + 1, atMost: limit + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := yamldoc.ExpandedSize([]byte(tt.in), limit)
			if got < tt.atLeast || got > tt.atMost {
				t.Errorf("ExpandedSize = %d, want in [%d, %d]", got, tt.atLeast, tt.atMost)
			}
		})
	}
}

func TestDecodeRefusesExpansion(t *testing.T) {
	r := yamldoc.Rules{Empty: "empty", NotDecoded: "not valid JSON", MaxExpandedBytes: 4096}
	if _, p := yamldoc.Decode([]byte(laughs(2)), r); p != "the document is more than 4096 bytes once its YAML aliases are expanded (the limit is 4096 bytes)" {
		t.Errorf("problem = %q", p)
	}
	if _, p := yamldoc.Decode([]byte(laughs(1)), r); p != "" {
		t.Errorf("a small expansion is refused: %q", p)
	}
	r.MaxExpandedBytes = 0 // no bound
	if _, p := yamldoc.Decode([]byte(laughs(2)), r); p != "" {
		t.Errorf("without a bound: %q", p)
	}
}

func BenchmarkExpandedSize(b *testing.B) {
	doc := []byte(laughs(3) + strings.Repeat("k: v\n", 2000))
	b.ReportAllocs()
	for b.Loop() {
		yamldoc.ExpandedSize(doc, 1<<20)
	}
}
