package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/endpointsfile"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/server"
)

const validateUsage = `Usage: epp validate [-o yaml|json] [--selection-strategy NAME] [--endpoints-file F] [--refresh-metrics-interval D] FILE...

Loads each EndpointPickerConfig file exactly as the server does and prints
FILE: OK, or every error with its field path. Warnings go to stderr.

With -o, stdout carries only the effective configurations, every default
filled in: YAML documents separated by ---, or JSON (the configuration for
one file; an object keyed by file name for several). Errors then go to
stderr.

With --selection-strategy (else $SWITCHYARD_SELECTION_STRATEGY) each file
is loaded with that strategy, as the server would: notes on stderr say
what it changes. With --endpoints-file, the warnings that depend on the
endpoints are checked against that standalone endpoints file too (LeastCost
with fewer than two priced replicas of a model). --refresh-metrics-interval
is the scrape interval the server will run with (default 50ms, as epp
serve's): plugins that judge metrics' age derive their defaults from it,
and engine-load-picker warns when its scrapeInterval differs.

Files are held to the bounds the server applies: at most 1 MiB (also once
YAML aliases are expanded), 512 plugins, 64 scheduling profiles and 128
plugin references per profile.

Exit code: 0 when every file is valid, 1 otherwise, 2 on usage errors.

Flags:
`

// runValidate implements `epp validate`: every file is loaded with the
// same loader, registry and defaults the server uses.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.String("o", "", "print the effective configuration: yaml or json")
	var strategyFlag string
	registerSelectionStrategy(fs, &strategyFlag)
	endpointsFile := fs.String("endpoints-file", "", "a standalone endpoints file to check the endpoint-dependent warnings against")
	refresh := fs.Duration("refresh-metrics-interval", server.Defaults().RefreshMetricsInterval, "the server's model-server metrics scrape interval, as given to epp serve")
	fs.Usage = func() {
		fmt.Fprint(stderr, validateUsage)
		fs.PrintDefaults()
	}
	// Flags may come before, between or after the files.
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch *output {
	case "", "yaml", "json":
	default:
		fmt.Fprintf(stderr, "epp validate: -o must be yaml or json, got %q\n", *output)
		return 2
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "epp validate: no file given")
		fs.Usage()
		return 2
	}
	if *refresh <= 0 {
		fmt.Fprintf(stderr, "epp validate: --refresh-metrics-interval must be positive, got %s\n", *refresh)
		return 2
	}
	strategy, _, err := selectionStrategy(strategyFlag)
	if err != nil {
		fmt.Fprintf(stderr, "epp validate: %v\n", err)
		return 2
	}
	var endpoints []*scheduling.Endpoint
	if *endpointsFile != "" {
		if endpoints, err = readEndpoints(*endpointsFile); err != nil {
			fmt.Fprintf(stderr, "epp validate: --endpoints-file: %v\n", err)
			return 1
		}
	}
	// Reports go to stdout, unless stdout carries configurations.
	report := stdout
	if *output != "" {
		report = stderr
	}
	code := 0
	var configs []*config.EndpointPickerConfig
	var valid []string
	for _, file := range files {
		loaded, err := config.LoadFile(file, config.Options{Registry: plugins.InTree(), SelectionStrategy: strategy, ScrapeInterval: *refresh})
		if err != nil {
			code = 1
			var verr *config.ValidationError
			if errors.As(err, &verr) {
				fmt.Fprintf(report, "%s: %d error(s):\n", file, len(verr.Errors))
				for _, fe := range verr.Errors {
					fmt.Fprintf(report, "  %s\n", fe.Error())
				}
			} else {
				fmt.Fprintf(report, "%s: %v\n", file, err)
			}
			continue
		}
		loaded.Close() // only its effective configuration is used
		warnings := slices.Concat(loaded.Warnings, plugins.ConfigWarnings(loaded), plugins.EndpointWarnings(loaded, endpoints))
		for _, w := range warnings {
			fmt.Fprintf(stderr, "%s: warning: %s\n", file, w)
		}
		for _, n := range loaded.Notes {
			fmt.Fprintf(stderr, "%s: note: %s\n", file, n)
		}
		if *output == "" {
			fmt.Fprintf(stdout, "%s: OK\n", file)
			continue
		}
		configs = append(configs, loaded.Config)
		valid = append(valid, file)
	}
	if err := render(stdout, *output, len(files) > 1, valid, configs); err != nil {
		fmt.Fprintf(stderr, "epp validate: %v\n", err)
		return 1
	}
	return code
}

// readEndpoints reads a standalone endpoints file into endpoints as the
// store publishes them (with their models and prices).
func readEndpoints(path string) ([]*scheduling.Endpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	specs, err := endpointsfile.Parse(data)
	if err != nil {
		return nil, err
	}
	store := datastore.New(datastore.Options{})
	if err := store.Replace(specs); err != nil {
		return nil, err
	}
	return store.Snapshot().All(), nil
}

// render prints the effective configurations of the valid files; with
// several files given, JSON output is an object keyed by file name.
func render(w io.Writer, format string, several bool, files []string, configs []*config.EndpointPickerConfig) error {
	switch format {
	case "yaml":
		for i, cfg := range configs {
			out, err := config.MarshalYAML(cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", files[i], err)
			}
			if i > 0 {
				fmt.Fprintln(w, "---")
			}
			fmt.Fprintf(w, "# %s\n%s", files[i], out)
		}
	case "json":
		if len(configs) == 0 {
			return nil
		}
		var v any = configs[0]
		if several {
			byFile := make(map[string]*config.EndpointPickerConfig, len(files))
			for i, f := range files {
				byFile[f] = configs[i]
			}
			v = byFile
		}
		out, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", out)
	}
	return nil
}
