// Package apierror encodes the OpenAI-style JSON error body that the EPP's
// immediate responses and the gateway's own replies carry:
//
//	{"error":{"message":"...","type":"...","param":null,"code":...}}
//
// The EPP puts the HTTP status in code (a number), the gateway its reason
// (a string).
//
// # Who imports it
//
// pkg/extproc and pkg/gateway. It imports only the standard library.
package apierror
