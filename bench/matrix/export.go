//go:build bench

package matrix

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The exported names below let the other drivers (bench/quality) reuse the
// matrix's process and Kubernetes setup.

// Proc is a process started by Start.
type Proc = proc

// RepoRoot returns the Switchyard module's root folder.
func RepoRoot(t testing.TB) string { return repoRoot(t) }

// Build compiles the product's EPP into dir and GIE's v1.5.0 EPP (cached
// in bin/) and returns their paths.
func Build(t testing.TB, root, dir string) (epp, gie string) { return build(t, root, dir) }

// RenderChart renders GIE v1.5.0's inferencepool chart for release in ns.
func RenderChart(t testing.TB, ns, release string) Chart { return renderChart(t, ns, release) }

// Start runs bin with args and env, logging to a file; it is stopped when
// the test ends or by Stop.
func Start(t testing.TB, name, bin string, env, args []string) *Proc {
	return start(t, name, bin, env, args)
}

// PID is the process id.
func (p *proc) PID() int { return p.pid() }

// Stop sends SIGTERM, then SIGKILL after 5 s, and waits.
func (p *proc) Stop() { p.stop() }

// Exited reports whether the process ended, with the end of its log.
func (p *proc) Exited() (bool, string) { return p.exited() }

// Healthy reports whether the gRPC health service at addr says service
// is SERVING.
func Healthy(addr, service string) bool { return healthy(addr, service) }

func healthy(addr, service string) bool {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
}
