// Package topology is the EPP's map of the sites it may route to: for each
// site its name (the grid_site of its rows and of its relay's SPIFFE ID),
// its cluster (grid_cluster), the gateway address a request for it goes to
// (host:port of the site's inference gateway) and the models it serves.
// The site store bounds itself by it (only its sites are kept, a site that
// leaves is dropped) and the poller refuses rows of any other site or
// cluster (site_mismatch).
//
// # Who imports it
//
// pkg/multisite/poller and pkg/multisite/sitestore (the sites rows may
// name), pkg/server (which owns the Watcher), and the site stage of the
// request path (issue 13), which reads Watcher.Topology, one atomic load.
// It imports pkg/multisite/signals (name rules), pkg/fielderr,
// pkg/internal/yamldoc and pkg/internal/filewatch. The InferencePoolImport
// watch is in the subpackage poolimport, so that the file format needs no
// Kubernetes client.
//
// # Inputs
//
// The local site (--site-name, --site-cluster) is always present. The
// topology file (--site-topology-file) is watched like the other files of
// the EPP (pkg/internal/filewatch: directory watch, ConfigMap symlink
// swaps, a re-read every 10 s). Parse decodes it strictly and reports
// every problem with its path (`sites[2].gateway`):
//
//	sites:
//	- name: site-b                     # DNS-1123 label, unique
//	  cluster: cluster-b               # DNS-1123 subdomain, unique
//	  gateway: 10.20.0.10:443          # ip:port (no host names); optional for the local site
//	  models: [meta-llama/Llama-3.1-8B-Instruct]   # optional: empty = every model
//
// An invalid file is refused at start (the EPP does not start) and on
// reload (an error log and switchyard_site_topology_reloads_total{result=
// "failure"}; the last good topology stays).
//
// In Kubernetes mode the status of the InferencePoolImport named like the
// EPP's pool, in its namespace (GIE mirrors an exported pool's name and
// namespace into every member cluster), adds the union of its
// controllers' exportingClusters. An exporting cluster that a site of the
// file has marks that site Exported; any other becomes a site named after
// the cluster (when the name is a DNS-1123 label) with no gateway
// address: its load is tracked, but it is not routable (Site.Routable)
// until the file gives it an address. InferencePoolImport v1alpha1 carries
// cluster names only, no addresses or models; the file is the place for
// those.
//
// Build merges the three into an immutable Topology, sorted by name, at
// most MaxSites (64) sites; the Watcher publishes a new one (with a higher
// Version) whenever the merge changes, and calls its OnChange functions.
//
// # Models
//
// A site with no models listed serves every model: an InferencePool is
// one serving stack, and an exported pool serves the same models in every
// cluster. List models to narrow a site (Site.Serves, Topology.Serving).
//
// # Goroutines
//
// Watcher.Run (the file watch) runs on its caller's goroutine until its
// context ends; pkg/server runs it as one of Server.Run's loops.
package topology
