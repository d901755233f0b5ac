// Package conventions holds tests that enforce the project's conventions
// (file names, plugin folders, READMEs, type names), in the style of
// CoreDNS's presubmit tests. See pkg/plugins/doc.go.
package conventions

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

const repoRoot = "../.."

// TestFileNames: Go files are snake_case, without hyphens.
func TestFileNames(t *testing.T) {
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".go") && strings.Contains(d.Name(), "-") {
			t.Errorf("%s: Go file names use underscores, not hyphens", path)
		}
		return nil
	})
	require.NoError(t, err)
}

var kebab = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// TestPluginTypes: every registered type is kebab-case.
func TestPluginTypes(t *testing.T) {
	for _, typ := range plugins.InTree().Types() {
		if !kebab.MatchString(typ) {
			t.Errorf("plugin type %q is not kebab-case", typ)
		}
	}
}

var (
	interfaceGuard = regexp.MustCompile(`(?m)^\s*(var\s+)?_\s+scheduling\.[A-Z]\w*\s*=\s*\(\*?\w+\)\(nil\)`)
	endpointSizes  = regexp.MustCompile(`10,\s*100,\s*1000`)
)

var readmeSections = []string{"## Type", "## Description", "## Parameters", "## Metrics", "## Example"}

// TestPluginFolders: every plugin folder has a README with the fixed
// sections naming a registered type, a test file and a benchmark file, and
// is registered in InTree.
func TestPluginFolders(t *testing.T) {
	reg := plugins.InTree()
	registered := map[string]bool{}
	for _, typ := range reg.Types() {
		registered[typ] = true
	}
	kinds, err := os.ReadDir(filepath.Join(repoRoot, "pkg", "plugins"))
	require.NoError(t, err)
	folders := 0
	for _, kind := range kinds {
		if !kind.IsDir() {
			continue
		}
		dirs, err := os.ReadDir(filepath.Join(repoRoot, "pkg", "plugins", kind.Name()))
		require.NoError(t, err)
		for _, d := range dirs {
			if !d.IsDir() || d.Name() == "internal" { // internal: helpers shared by plugins of a kind
				continue
			}
			folders++
			dir := filepath.Join(repoRoot, "pkg", "plugins", kind.Name(), d.Name())
			t.Run(kind.Name()+"/"+d.Name(), func(t *testing.T) {
				readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
				require.NoError(t, err, "every plugin folder has a README.md")
				doc := string(readme)
				last := -1
				for _, s := range readmeSections {
					i := strings.Index(doc, "\n"+s+"\n")
					require.Greater(t, i, last, "README section %q missing or out of order", s)
					last = i
				}
				title := regexp.MustCompile("^# `?([a-z0-9-]+)`?\n").FindStringSubmatch(doc)
				require.NotNil(t, title, "README starts with '# <type>'")
				require.True(t, registered[title[1]], "README title %q is not a registered type", title[1])
				example := doc[strings.Index(doc, "\n## Example\n"):]
				require.Contains(t, example, "type: "+title[1], "the example configures the plugin the README is about")
				files, err := os.ReadDir(dir)
				require.NoError(t, err)
				var hasTest, hasBench, hasGuard, benchSizes bool
				for _, f := range files {
					name := f.Name()
					hasTest = hasTest || strings.HasSuffix(name, "_test.go") && !strings.HasSuffix(name, "_bench_test.go")
					if !strings.HasSuffix(name, ".go") {
						continue
					}
					src, err := os.ReadFile(filepath.Join(dir, name))
					require.NoError(t, err)
					switch {
					case strings.HasSuffix(name, "_bench_test.go"):
						hasBench = true
						benchSizes = benchSizes || endpointSizes.Match(src)
					case !strings.HasSuffix(name, "_test.go"):
						hasGuard = hasGuard || interfaceGuard.Match(src)
					}
				}
				require.True(t, hasTest, "a _test.go file")
				require.True(t, hasBench, "a _bench_test.go file")
				require.True(t, hasGuard, "interface guards (var _ scheduling.X = (*T)(nil))")
				// Parsers and data-layer plugins do no per-endpoint work on
				// the request path; every other kind is measured at 10, 100
				// and 1000 endpoints.
				if kind.Name() != "parser" && kind.Name() != "datalayer" {
					require.True(t, benchSizes, "a benchmark over 10, 100 and 1000 endpoints")
				}
			})
		}
	}
	require.GreaterOrEqual(t, folders, 20)
}
