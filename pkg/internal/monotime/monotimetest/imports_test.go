package monotimetest_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/internal/monotime/monotimetest"
)

const importPath = "github.com/switchyard-ai/switchyard/pkg/internal/monotime/monotimetest"

// TestOnlyTestsImportIt: monotimetest edits time.Time through unsafe; no
// file but a _test.go file of the module may import it.
func TestOnlyTestsImportIt(t *testing.T) {
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "bin" || n == "vendor" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == importPath {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s imports monotimetest: only _test.go files may", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d files checked: wrong root?", checked)
	}
}

// TestWallSteppedSelfCheck: the stepped reading keeps its monotonic
// instant and moves its wall clock by exactly the step.
func TestWallSteppedSelfCheck(t *testing.T) {
	now := time.Now()
	out := monotimetest.WallStepped(t, now, 3*time.Hour)
	if out.Sub(now) != 0 || out.Round(0).Sub(now.Round(0)) != 3*time.Hour {
		t.Fatalf("out %v from %v", out, now)
	}
}
