package server

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocPathsExist: every package path the package doc names
// (pkg/tlsutil, pkg/tokenauth, ...) and every subpackage it lists exists,
// so a move (pkg/server/tokenauth became pkg/tokenauth) cannot leave the
// doc behind.
func TestDocPathsExist(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	paths := regexp.MustCompile(`\b(?:pkg|cmd)/[a-z0-9_/]*[a-z0-9_]`).FindAllString(text, -1)
	if len(paths) == 0 {
		t.Fatal("the doc names no package path: the pattern is wrong")
	}
	for _, p := range paths {
		if st, err := os.Stat(filepath.Join("..", "..", p)); err != nil || !st.IsDir() {
			t.Errorf("doc.go names %s, which is not a directory of the repository", p)
		}
	}
	_, subs, ok := strings.Cut(text, "// Subpackages: ")
	if !ok {
		t.Fatal(`doc.go has no "Subpackages: " sentence`)
	}
	subs, _, _ = strings.Cut(subs, ".")
	names := regexp.MustCompile(`(?:^|, | and )([a-z]+) \(`).FindAllStringSubmatch(strings.ReplaceAll(subs, "\n// ", " "), -1)
	if len(names) == 0 {
		t.Fatalf("no subpackage found in %q", subs)
	}
	for _, m := range names {
		if st, err := os.Stat(m[1]); err != nil || !st.IsDir() {
			t.Errorf("doc.go lists subpackage %s, which is not a directory of pkg/server", m[1])
		}
	}
}
