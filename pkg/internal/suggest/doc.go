// Package suggest holds what "did you mean ...?" hints are computed with:
// Distance, the edit distance between two words.
//
// # Who imports it
//
// pkg/scheduling (plugin type names) and pkg/datastore/endpointsfile
// (field names). It imports only the standard library.
package suggest
