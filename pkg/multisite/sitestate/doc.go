// Package sitestate is the contract between the multi-site control step
// and the request step (seed 000, §2.12 of seed-requirements.md): the
// learner (pkg/multisite/learner) computes, off the request path, one
// immutable Snapshot of every site candidate's judged state; the site
// stage (pkg/multisite/sitestage) reads it, by one atomic load, for every
// request and does nothing else that costs.
//
// # Who imports it
//
// The learner (which builds Snapshots), the site stage (which reads
// them), pkg/server (which publishes them on /debug/sites) and tests. It
// imports nothing of Switchyard and starts no goroutine; a Snapshot never
// changes once published.
package sitestate
