//go:build bench

package matrix

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
)

func newClient(c *grpc.ClientConn) extprocv3.ExternalProcessorClient {
	return extprocv3.NewExternalProcessorClient(c)
}
