// Package filewatch follows the content of a few files and calls back when
// it changes. It is the one watcher behind the configuration hot reload
// (pkg/server), the endpoints file (pkg/datastore/endpointsfile) and the
// TLS certificate reload (pkg/tlsutil).
//
// Run watches the parent directory of every path with fsnotify rather than
// the files themselves: editors and tools replace a file by renaming a new
// one over it, and the kubelet updates a mounted ConfigMap or Secret by
// atomically swapping a "..data" symlink, neither of which a watch on the
// file would follow. Any event in a watched directory starts the debounce
// timer again; when events have been quiet for the debounce period, the
// files are hashed. They are also hashed every poll period, in case an
// event was missed (a symlink into a directory that is not watched, an
// event queue overflow, a directory that cannot be watched at all).
//
// The callback runs only when the hash of all the files differs from the
// last one reported, or from Options.Initial before the first report. A
// file that cannot be read (missing, a directory, no permission) counts as
// content of its own, so a file that disappears is reported once, and again
// when it comes back.
//
// Only packages of this module may import it.
package filewatch
