// Command gen writes Switchyard's generated monitoring files: the Grafana
// dashboards (manifests/dashboards/*.json), their ConfigMaps and the
// PrometheusRule of manifests/overlays/monitoring. Run it with
// `go generate ./manifests/dashboards` or `go run ./manifests/dashboards/gen`
// from anywhere in the repository: it finds the manifests folder from its
// own source path, or from -manifests.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/switchyard-ai/switchyard/manifests/dashboards/internal/build"
)

func main() {
	dir := flag.String("manifests", "", "the repository's manifests folder (default: found from this command's source path)")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		_, self, _, ok := runtime.Caller(0)
		if !ok {
			return fmt.Errorf("cannot find the manifests folder: pass -manifests")
		}
		dir = filepath.Join(filepath.Dir(self), "..", "..")
	}
	files, err := build.Files()
	if err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
