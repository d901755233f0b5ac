package suggest_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/internal/suggest"
)

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"port", "port", 0},
		{"prot", "port", 2},
		{"adress", "address", 1},
		{"weigth", "weight", 2},
		{"kitten", "sitting", 3},
		{"Port", "port", 1},
	}
	for _, tt := range tests {
		if got := suggest.Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := suggest.Distance(tt.b, tt.a); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetry)", tt.b, tt.a, got, tt.want)
		}
	}
}

func BenchmarkDistance(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		suggest.Distance("max-score-pickr", "max-score-picker")
	}
}
