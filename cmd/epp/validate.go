package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// runValidate implements `epp validate`: every file is loaded with the
// same loader, registry and defaults the server uses.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.String("o", "", "print the effective configuration, every default filled in: yaml or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: epp validate [-o yaml|json] FILE...\n\nLoads each EndpointPickerConfig file as the server would and prints OK or every error.\nExit code 0 when all files are valid, 1 otherwise, 2 on usage errors.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch *output {
	case "", "yaml", "json":
	default:
		fmt.Fprintf(stderr, "epp validate: -o must be yaml or json, got %q\n", *output)
		return 2
	}
	files := fs.Args()
	if len(files) == 0 {
		fmt.Fprintln(stderr, "epp validate: no file given")
		fs.Usage()
		return 2
	}
	code := 0
	for i, file := range files {
		loaded, err := config.LoadFile(file, config.Options{Registry: plugins.InTree()})
		if err != nil {
			code = 1
			var verr *config.ValidationError
			if errors.As(err, &verr) {
				fmt.Fprintf(stdout, "%s: %d error(s):\n", file, len(verr.Errors))
				for _, fe := range verr.Errors {
					fmt.Fprintf(stdout, "  %s\n", fe.Error())
				}
			} else {
				fmt.Fprintf(stdout, "%s: %v\n", file, err)
			}
			continue
		}
		for _, w := range loaded.Warnings {
			fmt.Fprintf(stderr, "%s: warning: %s\n", file, w)
		}
		switch *output {
		case "":
			fmt.Fprintf(stdout, "%s: OK\n", file)
		case "json":
			out, err := json.MarshalIndent(loaded.Config, "", "  ")
			if err != nil {
				fmt.Fprintf(stderr, "%s: render: %v\n", file, err)
				return 1
			}
			fmt.Fprintf(stdout, "%s\n", out)
		case "yaml":
			out, err := config.MarshalYAML(loaded.Config)
			if err != nil {
				fmt.Fprintf(stderr, "%s: render: %v\n", file, err)
				return 1
			}
			if i > 0 {
				fmt.Fprintln(stdout, "---")
			}
			fmt.Fprintf(stdout, "# %s: OK\n%s", file, out)
		}
	}
	return code
}
