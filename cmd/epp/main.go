// Command epp is Switchyard's endpoint picker.
//
//	epp validate [-o yaml|json] FILE...   check configuration files
//
// Exit codes: 0 success, 1 an invalid configuration, 2 a usage error.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Switchyard endpoint picker.

Usage:
  epp validate [-o yaml|json] FILE...   load each EndpointPickerConfig file exactly as the
                                        server does; print OK, or every error with its path

Run "epp validate -h" for the flags of a command.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "validate":
		return runValidate(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "epp: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
