// Package tokenauth guards an HTTP handler with one static bearer token
// read from a file: the metrics port's protection where there is no API
// server to ask (standalone mode, or Kubernetes mode with
// --metrics-endpoint-auth=false), set with --metrics-token-file.
//
// A request needs "Authorization: Bearer <token>" with the file's token;
// otherwise it gets 401 with a WWW-Authenticate challenge. The token is
// compared by its SHA-256 in constant time and never logged. The file is
// watched (Guard.Run): a rotated token (a Secret update, an atomic rename)
// takes effect within the watch's debounce, or at the next 10-second
// poll; a file that becomes unreadable or invalid is logged and the last
// good token stays, so a broken rotation does not open the port.
//
// Imported by pkg/server. Guard.Run is the only goroutine; its caller owns
// it and stops it with the context.
package tokenauth
