// Package promreg registers Prometheus collectors on an injected
// registerer, reusing the collector already registered under the same name
// (a second scraper or source on the same registry, or a reload). It is
// internal to pkg/datastore and its sub-packages.
package promreg
