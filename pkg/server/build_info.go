package server

import "runtime/debug"

// buildInfo returns the VCS revision and the module version for
// inference_extension_info.
func buildInfo() (commit, ref string) {
	commit, ref = "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if bi.Main.Version != "" {
		ref = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			commit = s.Value
		}
	}
	return
}
