package config

import "testing"

func TestSnakeToCamel(t *testing.T) {
	for in, want := range map[string]string{
		"full_after_ms": "fullAfterMs", "shedding": "shedding", "_x": "x", "a__b": "aB", "trailing_": "trailing", "": "",
	} {
		if got := snakeToCamel(in); got != want {
			t.Errorf("snakeToCamel(%q) = %q, want %q", in, got, want)
		}
	}
}
