package server

import (
	"context"

	"github.com/switchyard-ai/switchyard/pkg/multisite/gwhealth"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// siteStep is the request step of multi-site beside the signals source:
// the holder the learner publishes its site snapshots into, the prober of
// the remote sites' gateways (whose Demoted the learner reads), and the
// site stage the request path (extproc.Options.Sites) runs.
type siteStep struct {
	holder *sitestate.Holder
	health *gwhealth.Prober
	stage  *sitestage.Stage
}

// newSiteStep builds the site step of m; its prober probes only the
// gateways of m's topology.
func (s *Server) newSiteStep(m *multisite) error {
	log := s.log.WithName("multisite")
	m.step.holder = m.learner.Holder() // the learner publishes, the stage reads
	var err error
	if m.step.health, err = gwhealth.New(gwhealth.Options{
		Targets:    m.gatewayTargets,
		Registerer: s.reg,
		Logger:     log.WithName("gateway-health"),
	}); err != nil {
		return err
	}
	m.step.stage, err = sitestage.New(sitestage.Options{
		Holder:       m.step.holder,
		LocalSite:    m.cfg.Site,
		LocalCluster: m.cfg.Cluster,
		Registerer:   s.reg,
		Logger:       log.WithName("site-stage"),
	})
	return err
}

// gatewayTargets are the remote sites of the current topology that have
// a gateway address.
func (m *multisite) gatewayTargets() []gwhealth.Target {
	t := m.topo.Topology()
	out := make([]gwhealth.Target, 0, t.Len())
	for _, st := range t.Sites() {
		if !st.Local && st.Gateway != "" {
			out = append(out, gwhealth.Target{Site: st.Name, Gateway: st.Gateway})
		}
	}
	return out
}

// startSiteStep runs the gateway prober on the server's run group.
func (m *multisite) startSiteStep(goLoop func(func(context.Context))) {
	goLoop(m.step.health.Run)
}

// addGatewayHealth adds the probe state of each remote gateway to the
// /debug/sites document.
func (m *multisite) addGatewayHealth(out *SitesState) {
	v := m.step.health.View()
	for i := range out.Sites {
		if st, ok := v.Sites[out.Sites[i].Name]; ok {
			out.Sites[i].GatewayHealth = &st
		}
	}
}

// siteStage is extproc.Options.Sites: nil without multi-site.
func (s *Server) siteStage() *sitestage.Stage {
	if s.multisite == nil {
		return nil
	}
	return s.multisite.step.stage
}

// SiteHolder is where the learner publishes the site snapshots the site
// stage reads; nil without multi-site.
func (s *Server) SiteHolder() *sitestate.Holder {
	if s.multisite == nil {
		return nil
	}
	return s.multisite.step.holder
}

// GatewayHealth is the prober of the remote gateways (its Demoted is the
// learner's input); nil without multi-site.
func (s *Server) GatewayHealth() *gwhealth.Prober {
	if s.multisite == nil {
		return nil
	}
	return s.multisite.step.health
}
