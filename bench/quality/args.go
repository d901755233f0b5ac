package quality

import "strings"

// WithConfig replaces the --config-file argument of an EPP's command line with file, or
// drops it when file is empty (the EPP's built-in default).
func WithConfig(args []string, file string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--config-file" && i+1 < len(args):
			i++
			if file != "" {
				out = append(out, a, file)
			}
		case strings.HasPrefix(a, "--config-file="):
			if file != "" {
				out = append(out, "--config-file="+file)
			}
		default:
			out = append(out, a)
		}
	}
	return out
}
