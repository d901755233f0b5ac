package objectives_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/objectives"
)

// FuzzObjectivesFile: Parse never panics; an error is a non-empty
// *ValidationError whose problems have a field path, or are problems of
// the whole document; an accepted table holds valid priorities.
func FuzzObjectivesFile(f *testing.F) {
	for _, s := range []string{
		"objectives:\n- {name: critical, priority: 100}\n- {name: batch, priority: -10}\n",
		"objectives: []\n", "", "objectives:\n", "[1]", "a: &x [*x]\n",
		"objectives: [a, null, 3, {name: [1]}, {name: a, priority: 1e99}]\n",
		"objectives:\n- name: a\n---\nobjectives: []\n",
		`{"objectives": [{"name": "A", "priority": "1", "x": 2}]}`,
	} {
		f.Add([]byte(s))
	}
	docProblems := []string{"the file is empty", "a second YAML document", "not valid YAML", "expected an object", "the document is more than"}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		tab, err := objectives.Parse(data)
		if err == nil {
			if tab == nil {
				t.Fatal("nil table without error")
			}
			for _, n := range tab.Names() {
				if p, ok := tab.Priority(n); !ok || p < -1<<31 || p > 1<<31-1 {
					t.Fatalf("objective %q: priority %d", n, p)
				}
			}
			return
		}
		var ve *objectives.ValidationError
		if !errors.As(err, &ve) || len(ve.Errors) == 0 {
			t.Fatalf("error is not a non-empty *ValidationError: %T %v", err, err)
		}
		for _, fe := range ve.Errors {
			if fe.Path != "" {
				continue
			}
			known := false
			for _, d := range docProblems {
				known = known || strings.HasPrefix(fe.Msg, d)
			}
			if !known {
				t.Fatalf("error without a path: %q", fe.Msg)
			}
		}
	})
}
