// Package testmod gives tests the files of a Go module at an exact
// version (CRDs, Helm charts, example configurations), downloaded through
// the Go module proxy at test time. Nothing is vendored into the repository.
package testmod

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Dir downloads module@version into the module cache and returns the
// directory holding its files. The download runs in a temporary module so
// that the repository's go.mod and go.sum are not involved (the module
// need not be a dependency). It fails the test on any error.
func Dir(t testing.TB, module, version string) string {
	t.Helper()
	tmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module testmod-download\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s@%s: %v\n%s\n%s", module, version, err, stderr.String(), out)
	}
	var info struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("go mod download %s@%s: %v\n%s", module, version, err, out)
	}
	if info.Error != "" {
		t.Fatalf("go mod download %s@%s: %s", module, version, info.Error)
	}
	if _, err := os.Stat(info.Dir); err != nil {
		t.Fatalf("go mod download %s@%s: %v", module, version, err)
	}
	return info.Dir
}
