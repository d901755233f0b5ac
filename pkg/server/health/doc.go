// Package health implements the gRPC Health Checking service the endpoint
// picker serves on --grpc-health-port (9003), with GIE v1.5.0's service
// names and semantics (reference/gie-epp.md §1.8), so that GIE's Helm chart
// probes work unchanged. pkg/server (the serve command) imports it.
//
// # Services
//
//	service                                        answer
//	"liveness"                                     SERVING whenever the process answers
//	"readiness", "" (overall)                      SERVING iff ready()
//	"envoy.service.ext_proc.v3.ExternalProcessor"  SERVING iff ready()
//	"inference-extension" (the chart's probes)     SERVING iff ready()
//	anything else                                  leader election on: SERVICE_UNKNOWN
//	                                               leader election off: SERVING iff ready()
//
// ready() is the caller's readiness: the pool (or standalone endpoint set)
// has been loaded and, with leader election enabled, this replica leads.
// Unknown services get a SERVICE_UNKNOWN status with a nil error, as GIE
// answers (the stock grpc health server returns a NotFound error instead).
//
// # Deviation from GIE: liveness never fails
//
// With leader election disabled GIE ignores the service name, so even
// "liveness" answers NOT_SERVING until the pool has synced. Switchyard
// answers "liveness" with SERVING in both modes: a liveness probe that
// fails while the pool is missing makes the kubelet restart a healthy
// process in a loop, which fixes nothing (GIE itself keeps liveness
// independent of sync when leader election is on, for the same reason).
// GIE's single-replica chart probes the name "inference-extension" for both
// its liveness and readiness probes, and that name still follows ready(),
// so charts behave exactly as with GIE.
//
// List reports every known service name; Watch returns Unimplemented, as in
// GIE, so clients fall back to polling Check.
package health
