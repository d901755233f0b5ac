package server

import (
	"context"
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/objectives"
)

// objectiveSource is where the priorities of InferenceObjectives come
// from: the watched file (standalone mode, Config.ObjectivesFile), the
// InferenceObjective watch (Kubernetes mode, Config.Objectives), or
// nothing (every request has priority 0).
type objectiveSource struct {
	set *objectives.Set
	run func(ctx context.Context) error // nil: nothing runs
}

// newObjectives builds the objective source and loads the file, so that
// a bad file stops the start.
func (s *Server) newObjectives() error {
	o := &objectiveSource{set: objectives.NewSet()}
	s.objectives = o
	switch {
	case s.cfg.ObjectivesFile != "" && s.cfg.Objectives != nil:
		return fmt.Errorf("objectives: an objectives file and the InferenceObjective watch are mutually exclusive")
	case s.cfg.ObjectivesFile != "":
		src := objectives.NewFileSource(s.cfg.ObjectivesFile, o.set, s.log.WithName("objectives"))
		if err := src.Load(); err != nil {
			return fmt.Errorf("--objectives-file: %w", err)
		}
		o.run = src.Run
	case s.cfg.Objectives != nil:
		r, err := s.cfg.Objectives(o.set)
		if err != nil {
			return fmt.Errorf("InferenceObjective watch: %w", err)
		}
		o.run = r.Run
	}
	return nil
}

// Objectives is the current mapping of InferenceObjective names to
// priorities (read-only use).
func (s *Server) Objectives() *objectives.Set { return s.objectives.set }
