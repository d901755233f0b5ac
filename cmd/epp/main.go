// Command epp is Switchyard's endpoint picker.
//
//	epp [serve] [flags]                   serve (GIE's flags; the default command)
//	epp demo [flags]                      model-server simulators + EPP + gateway on loopback
//	epp gateway [flags]                   the small ext_proc-speaking HTTP gateway
//	epp validate [-o yaml|json] FILE...   check configuration files
//
// Exit codes: 0 success, 1 an invalid configuration, 2 a usage error.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/grpc/experimental"

	"github.com/switchyard-ai/switchyard/pkg/grpcpool"
)

// gRPC's proto codec marshals and unmarshals with the default buffer pool,
// which only this can change, and only at init (see package grpcpool).
func init() { experimental.SetDefaultBufferPool(grpcpool.Pool) }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Switchyard endpoint picker.

Usage:
  epp [serve] [flags]                   serve the endpoint picker (ext_proc on 9002, health on
                                        9003, metrics on 9090); GIE's flags work unchanged
  epp demo [flags]                      run simulated model servers, the EPP and a gateway on
                                        this machine (no cluster, no GPU) and watch it route
  epp gateway [flags]                   run the small HTTP gateway that calls an EPP over ext_proc
  epp validate [-o yaml|json] FILE...   load each EndpointPickerConfig file exactly as the
                                        server does; print OK, or every error with its path

serve, demo and validate take --selection-strategy NAME (else $SWITCHYARD_SELECTION_STRATEGY):
the selection strategy of every strategy-picker, or of a strategy-picker in place of each
profile's picker when the configuration has none.

Run "epp <command> -h" for the flags of a command.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if strings.HasPrefix(args[0], "-") && args[0] != "-h" && args[0] != "--help" {
		// GIE's manifests run the binary with flags only.
		return runServe(args, stdout, stderr)
	}
	switch args[0] {
	case "serve":
		return runServe(args[1:], stdout, stderr)
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	case "gateway":
		return runGateway(args[1:], stdout, stderr)
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
