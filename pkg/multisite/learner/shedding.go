package learner

import (
	"slices"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// OtherModels stands, in the shedding state and the grid_route_shedding
// gauge, for the models no site names: those only the sites that serve
// every model (an empty model list) serve. Snapshot.ShedOthers carries
// its state.
const OtherModels = "*"

// decideShedding decides, per model, whether it is shed (G-60 … G-62),
// with hysteresis: a model starts shedding once every counted site
// serving it is full, and routes again once one of them shows room (no
// sample at the limit for room_after_ms, or an emptied queue at once).
// The counted sites are the ready, live (not silent), measured
// (publishing load), undemoted ones (G-43, G-48, G-61); a model with none
// is not shed.
func (l *Learner) decideShedding(out *sitestate.Snapshot) {
	models := out.Known
	if out.AnyModel {
		models = append(slices.Clip(models), OtherModels)
	}
	if !l.set.Shedding {
		clear(l.shed)
		for _, m := range models {
			l.shed[m] = false
		}
		return
	}
	roomAfter := ms(l.set.RoomAfterMs)
	keep := make(map[string]bool, len(models))
	for _, m := range models {
		keep[m] = true
		counted, allFull, anyRelieved := 0, true, false
		for i := range out.Sites {
			s := &out.Sites[i]
			if m == OtherModels {
				if len(s.Models) != 0 {
					continue
				}
			} else if !s.Serves(m) {
				continue
			}
			if !s.Ready || s.Silent || !s.PublishesLoad || s.Demoted || !s.Telemetry {
				continue
			}
			counted++
			if !s.Full {
				allFull = false
			}
			if sl := l.sites[s.Name]; sl != nil && sl.relieved(roomAfter) {
				anyRelieved = true
			}
		}
		was := l.shed[m]
		now := was
		switch {
		case counted == 0:
			now = false
		case !was && allFull:
			now = true
		case was && anyRelieved:
			now = false
		}
		if now != was {
			if now {
				l.log.V(1).Info("Shedding a model: every site serving it is full", "model", m, "sites", counted)
			} else {
				l.log.V(1).Info("A shed model routes again", "model", m)
			}
		}
		l.shed[m] = now
		if now {
			if m == OtherModels {
				out.ShedOthers = true
			} else {
				out.Shed = append(out.Shed, m)
			}
		}
	}
	for m := range l.shed {
		if !keep[m] {
			delete(l.shed, m)
		}
	}
}
