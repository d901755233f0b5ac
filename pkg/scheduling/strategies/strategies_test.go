package strategies

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in, want, wantType string
	}{
		{"RoundRobin", RoundRobin, "round-robin-picker"},
		{"roundRobin", RoundRobin, "round-robin-picker"},
		{"roundrobin", RoundRobin, "round-robin-picker"},
		{"ROUNDROBIN", RoundRobin, "round-robin-picker"},
		{"round_robin", RoundRobin, "round-robin-picker"},
		{"round-robin", RoundRobin, "round-robin-picker"},
		{"Round-Robin", RoundRobin, "round-robin-picker"},
		{"ROUND_ROBIN", RoundRobin, "round-robin-picker"},
		{"  round-robin\n", RoundRobin, "round-robin-picker"},
		{"WeightedRoundRobin", WeightedRoundRobin, "weighted-round-robin-picker"},
		{"weighted_round_robin", WeightedRoundRobin, "weighted-round-robin-picker"},
		{"weighted-round-robin", WeightedRoundRobin, "weighted-round-robin-picker"},
		{"least_latency", LeastLatency, "least-latency-picker"},
		{"random", Random, "random-picker"},
		{"RANDOM", Random, "random-picker"},
		{"consistent-hash", ConsistentHash, "consistent-hash-picker"},
		{"prefix_aware_hash", PrefixAwareHash, "prefix-aware-hash-picker"},
		{"engine-load", EngineLoad, "engine-load-picker"},
		{"EngineLoad", EngineLoad, "engine-load-picker"},
		{"least-busy", LeastBusy, "least-busy-picker"},
		{"leastbusy", LeastBusy, "least-busy-picker"},
		{"least_cost", LeastCost, "least-cost-picker"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, typ, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got != tt.want || typ != tt.wantType {
				t.Errorf("Parse(%q) = %q, %q; want %q, %q", tt.in, got, typ, tt.want, tt.wantType)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	const valid = "valid: RoundRobin, WeightedRoundRobin, LeastLatency, Random, ConsistentHash, PrefixAwareHash, EngineLoad, LeastBusy, LeastCost"
	for _, in := range []string{
		"", " ", "bogus", "round robin", "round--robin", "-round-robin", "round-robin-", "_", "rou_ndrobin",
		"least_busy_picker", "round-robin-picker", "roundrobin2", "Random!", "random\x00", "ラウンドロビン",
		"weighted_roundrobin", "round_robin_weighted",
	} {
		t.Run(in, func(t *testing.T) {
			got, typ, err := Parse(in)
			if err == nil {
				t.Fatalf("Parse(%q) = %q, %q; want an error", in, got, typ)
			}
			if !errors.Is(err, ErrUnknown) {
				t.Errorf("error %v does not wrap ErrUnknown", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "unknown strategy ") || !strings.Contains(msg, valid) {
				t.Errorf("error %q does not name the input and list the valid names", msg)
			}
			if got != "" || typ != "" {
				t.Errorf("Parse(%q) returned %q, %q with its error", in, got, typ)
			}
		})
	}
	_, _, err := Parse("bogus")
	if want := `unknown strategy "bogus"; ` + valid + " (case-insensitive; PascalCase, snake_case or kebab-case)"; err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
}

// Every canonical name, and its snake_case and kebab-case spellings, parse
// back to it; plugin types are unique kebab-case picker types.
func TestTable(t *testing.T) {
	names := Names()
	if len(names) != 9 || names[0] != Default {
		t.Fatalf("Names() = %v; want nine, RoundRobin (the default) first", names)
	}
	types := map[string]bool{}
	for _, s := range All() {
		snake := snakeCase(s.Name)
		for _, spelling := range []string{s.Name, snake, strings.ReplaceAll(snake, "_", "-"), strings.ToUpper(snake)} {
			got, typ, err := Parse(spelling)
			if err != nil || got != s.Name || typ != s.PluginType {
				t.Errorf("Parse(%q) = %q, %q, %v; want %q, %q", spelling, got, typ, err, s.Name, s.PluginType)
			}
		}
		if !strings.HasSuffix(s.PluginType, "-picker") || types[s.PluginType] {
			t.Errorf("plugin type %q: want a unique ...-picker type", s.PluginType)
		}
		types[s.PluginType] = true
		if typ, ok := PluginType(s.Name); !ok || typ != s.PluginType {
			t.Errorf("PluginType(%q) = %q, %v", s.Name, typ, ok)
		}
	}
	if _, ok := PluginType("roundrobin"); ok {
		t.Error("PluginType accepts a non-canonical name")
	}
	// All and Names return copies.
	all := All()
	all[0].Name = "x"
	names[0] = "x"
	if All()[0].Name != RoundRobin || !slices.Contains(Names(), RoundRobin) {
		t.Error("All or Names shares the table")
	}
}

func snakeCase(pascal string) string {
	var b strings.Builder
	for i, c := range pascal {
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"RoundRobin", "least_busy", "engine-load", "", "-", "x_y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, typ, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrUnknown) {
				t.Fatalf("Parse(%q): error %v does not wrap ErrUnknown", in, err)
			}
			return
		}
		if want, ok := PluginType(got); !ok || want != typ {
			t.Fatalf("Parse(%q) = %q, %q: not a table entry", in, got, typ)
		}
		// A name that parses is the canonical one up to case and separators.
		if strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(strings.TrimSpace(in))) != strings.ToLower(got) {
			t.Fatalf("Parse(%q) = %q", in, got)
		}
	})
}

func TestInstanceNames(t *testing.T) {
	if got := StrategyInstance("p"); got != "p/strategy" {
		t.Errorf("StrategyInstance(p) = %q", got)
	}
	if got := BaseInstance("p/strategy"); got != "p/strategy/base" {
		t.Errorf("BaseInstance(p/strategy) = %q", got)
	}
}

func TestCheckNestedParameters(t *testing.T) {
	for _, tt := range []struct{ raw, wantErr string }{
		{raw: ""}, {raw: "null"}, {raw: " {} "}, {raw: `{"virtualNodes": 3}`},
		{raw: `[1]`, wantErr: "expected an object"},
		{raw: `"x"`, wantErr: "expected an object"},
		{raw: `{"maxNumOfEndpoints": 2}`, wantErr: "maxNumOfEndpoints: not allowed here"},
	} {
		err := CheckNestedParameters([]byte(tt.raw))
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("CheckNestedParameters(%s) = %v, want %q", tt.raw, err, tt.wantErr)
		}
	}
}
