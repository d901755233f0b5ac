package server

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSiteStepWiring: with multi-site on, the server builds the site
// stage (extproc.Options.Sites) over the holder the learner publishes
// into, and runs the gateway prober over the topology's remote gateways
// only (a loopback listener here), stopped with Run.
func TestSiteStepWiring(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	f := startSignalsRelay(t, func() string { return "" })
	topo := filepath.Join(t.TempDir(), "topology.yaml")
	require.NoError(t, os.WriteFile(topo, []byte("sites:\n- {name: site-b, cluster: cluster-b, gateway: \""+lis.Addr().String()+"\"}\n"), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), Multisite: f.config(topo)})

	require.NotNil(t, s.SiteHolder())
	require.NotNil(t, s.siteStage())
	site, cluster := s.siteStage().LocalSite()
	assert.Equal(t, "site-a", site)
	assert.Equal(t, "cluster-a", cluster)
	require.Eventually(t, func() bool { return s.GatewayHealth().View().Sites["site-b"].Probed }, 10*time.Second, 10*time.Millisecond)
	st := s.GatewayHealth().View().Sites["site-b"]
	assert.Equal(t, lis.Addr().String(), st.Gateway)
	assert.Empty(t, st.LastError)
	assert.Len(t, s.GatewayHealth().View().Sites, 1, "only the remote site is probed")
	assert.Equal(t, st.Passes >= 2, st.Up, "up after two passes (a loaded machine may have run the second round already): %+v", st)
	assert.False(t, s.GatewayHealth().Demoted("site-a", ""))
	state := s.Sites()
	require.Len(t, state.Sites, 2)
	assert.Nil(t, state.Sites[0].GatewayHealth, "the local site is not probed")
	require.NotNil(t, state.Sites[1].GatewayHealth)
	assert.Equal(t, lis.Addr().String(), state.Sites[1].GatewayHealth.Gateway)
}

func TestSiteStepOff(t *testing.T) {
	s, _ := run(t, Config{EndpointsFile: sims(t, 1)})
	assert.Nil(t, s.SiteHolder())
	assert.Nil(t, s.siteStage())
	assert.Nil(t, s.GatewayHealth())
}
