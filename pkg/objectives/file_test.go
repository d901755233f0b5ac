package objectives_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/objectives"
)

func TestParseValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want map[string]int
	}{
		{"list", "objectives:\n- name: critical\n  priority: 100\n- name: batch\n  priority: -10\n", map[string]int{"critical": 100, "batch": -10}},
		{"default priority", "objectives:\n- name: standard\n", map[string]int{"standard": 0}},
		{"null priority", "objectives:\n- {name: standard, priority: null}\n", map[string]int{"standard": 0}},
		{"empty", "objectives: []\n", map[string]int{}},
		{"null list", "objectives:\n", map[string]int{}},
		{"json", `{"objectives": [{"name": "a.b-c", "priority": 2147483647}, {"name": "z", "priority": -2147483648}]}`, map[string]int{"a.b-c": 2147483647, "z": -2147483648}},
		{"trailing marker", "objectives: []\n---\n", map[string]int{}},
		{"leading marker", "---\nobjectives: [{name: a, priority: 1}]\n", map[string]int{"a": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := objectives.Parse([]byte(tc.in))
			require.NoError(t, err)
			assert.True(t, objectives.NewTable(tc.want).Equal(tab), "got %v", tab.Names())
			for k, v := range tc.want {
				p, ok := tab.Priority(k)
				assert.True(t, ok)
				assert.Equal(t, v, p)
			}
			_, ok := tab.Priority("unknown")
			assert.False(t, ok)
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string // "path: message" prefixes, every one present
	}{
		{"empty", "", []string{"the file is empty"}},
		{"not an object", "[1]", []string{"expected an object with an objectives list, got a list"}},
		{"missing", "other: 1\n", []string{`other: unknown field "other"`, "objectives: required"}},
		{"not a list", "objectives: 3\n", []string{"objectives: expected a list"}},
		{"bad entry", "objectives: [3]\n", []string{"objectives[0]: expected an object"}},
		{"no name", "objectives:\n- priority: 1\n", []string{"objectives[0].name: required"}},
		{"name type", "objectives:\n- name: 5\n", []string{"objectives[0].name: expected a string"}},
		{"bad name", "objectives:\n- name: Not_Valid\n", []string{`objectives[0].name: "Not_Valid" is not a valid objective name`}},
		{"duplicate", "objectives:\n- name: a\n- name: b\n- name: a\n", []string{`objectives[2].name: "a" is already defined by objectives[0]`}},
		{"priority type", "objectives:\n- name: a\n  priority: high\n", []string{"objectives[0].priority: expected an integer, got a string"}},
		{"priority float", "objectives:\n- name: a\n  priority: 1.5\n", []string{"objectives[0].priority: expected an integer, got 1.5"}},
		{"priority range", "objectives:\n- name: a\n  priority: 2147483648\n", []string{"objectives[0].priority: 2147483648 is out of range"}},
		{"unknown key", "objectives:\n- name: a\n  prio: 1\n", []string{`objectives[0].prio: unknown field "prio"`}},
		{"empty key", "\"\": 1\nobjectives: []\n", []string{`[""]: unknown field ""`}},
		{"repeated key", "objectives:\n- name: a\n  name: b\n", []string{"not valid YAML"}},
		{"second document", "objectives: []\n---\nobjectives: []\n", []string{"a second YAML document starts at line 2"}},
		{"every problem at once", "objectives:\n- name: 1\n- priority: x\n", []string{"objectives[0].name: expected a string", "objectives[1].name: required", "objectives[1].priority: expected an integer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := objectives.Parse([]byte(tc.in))
			require.Error(t, err)
			assert.Nil(t, tab)
			var ve *objectives.ValidationError
			require.True(t, errors.As(err, &ve), "%T", err)
			var lines []string
			for _, fe := range ve.Errors {
				lines = append(lines, fe.Error())
			}
			for _, w := range tc.want {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, w)
				}
				assert.True(t, found, "want %q in %q", w, lines)
			}
			assert.Len(t, lines, len(tc.want), "%q", lines)
		})
	}
}

func TestParseBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("objectives:\n")
	for i := range objectives.MaxObjectives + 1 {
		b.WriteString("- name: o")
		b.WriteString(strings.Repeat("x", i%3))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString("\n")
	}
	_, err := objectives.Parse([]byte(b.String()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "objectives: 10001 objectives exceed the limit of 10000")
	_, err = objectives.Parse([]byte("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "aliases are expanded")
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// TestFileSourceWatch: the file's objectives serve after Load; an edit is
// followed; a broken edit is refused and the last good table keeps
// serving; a fixed file serves again; a deleted objective has no
// priority any more.
func TestFileSourceWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "objectives.yaml")
	writeAtomic(t, path, "objectives:\n- {name: critical, priority: 10}\n- {name: batch, priority: -1}\n")
	set := objectives.NewSet()
	src := objectives.NewFileSource(path, set, testr.New(t))
	require.NoError(t, src.Load())
	p, ok := set.Lookup("critical")
	assert.True(t, ok)
	assert.Equal(t, 10, p)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	writeAtomic(t, path, "objectives:\n- {name: critical, priority: 20}\n")
	require.Eventually(t, func() bool { p, _ := set.Lookup("critical"); return p == 20 }, 10*time.Second, 10*time.Millisecond)
	_, ok = set.Lookup("batch")
	assert.False(t, ok, "a removed objective has no priority: its requests go to the default band")

	writeAtomic(t, path, "objectives:\n- {name: critical, priority: high}\n")
	time.Sleep(400 * time.Millisecond)
	p, ok = set.Lookup("critical")
	assert.True(t, ok, "the last good table keeps serving")
	assert.Equal(t, 20, p)

	writeAtomic(t, path, "objectives:\n- {name: critical, priority: 30}\n")
	require.Eventually(t, func() bool { p, _ := set.Lookup("critical"); return p == 30 }, 10*time.Second, 10*time.Millisecond)
}

func TestFileSourceLoadErrors(t *testing.T) {
	dir := t.TempDir()
	set := objectives.NewSet()
	err := objectives.NewFileSource(filepath.Join(dir, "missing.yaml"), set, testr.New(t)).Load()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.yaml")
	path := filepath.Join(dir, "bad.yaml")
	writeAtomic(t, path, "objectives:\n- {name: a, priority: x}\n")
	err = objectives.NewFileSource(path, set, testr.New(t)).Load()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "objectives[0].priority")
	assert.Equal(t, 0, set.Table().Len())
}

func TestSetOnChange(t *testing.T) {
	set := objectives.NewSet()
	_, ok := set.Lookup("a")
	assert.False(t, ok, "an empty set knows nothing")
	var got *objectives.Table
	set.OnChange(func(t *objectives.Table) { got = t })
	tab := objectives.NewTable(map[string]int{"a": 1})
	set.Store(tab)
	assert.Same(t, tab, got)
	assert.Equal(t, []string{"a"}, set.Table().Names())
}

func BenchmarkLookup(b *testing.B) {
	m := map[string]int{}
	for i := range 100 {
		m["objective-"+string(rune('a'+i%26))+string(rune('a'+i/26))] = i
	}
	set := objectives.NewSet()
	set.Store(objectives.NewTable(m))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := set.Lookup("objective-ab"); !ok {
			b.Fatal("not found")
		}
	}
}

// TestReadmeExample: the objectives file the README's flow-control
// section shows parses.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(readme), "\n## Flow control\n")
	require.True(t, ok, "README has a Flow control section")
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, block, ok := strings.Cut(sec, "```yaml\n")
	require.True(t, ok)
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	for l := range strings.SplitSeq(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "  "))
	}
	tab, err := objectives.Parse([]byte(strings.Join(lines, "\n")))
	require.NoError(t, err)
	p, ok := tab.Priority("batch")
	assert.True(t, ok)
	assert.Equal(t, -10, p)
}
