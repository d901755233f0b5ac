package sitestate

import (
	"math"
	"testing"
)

func TestSnapshotLookups(t *testing.T) {
	sn := &Snapshot{
		Sites: []Site{{Name: "a", Models: []string{"m1", "m2"}}, {Name: "b", Local: true}},
		Shed:  []string{"m1"},
		Known: []string{"m1", "m2"},
	}
	if !sn.Shedding("m1") || sn.Shedding("m2") {
		t.Fatal("Shedding")
	}
	if !sn.ServesModel("m2") || sn.ServesModel("m3") {
		t.Fatal("ServesModel")
	}
	sn.ShedOthers = true
	if !sn.Shedding("m9") || sn.Shedding("m2") || !sn.Shedding("m1") {
		t.Fatal("ShedOthers")
	}
	sn.ShedOthers = false
	sn.AnyModel = true
	if !sn.ServesModel("m3") {
		t.Fatal("AnyModel")
	}
	if l, ok := sn.Local(); !ok || l.Name != "b" {
		t.Fatal("Local")
	}
	if !sn.Sites[0].Serves("m1") || sn.Sites[0].Serves("m3") || !sn.Sites[1].Serves("x") {
		t.Fatal("Serves")
	}
	var h Holder
	if h.Load() != nil {
		t.Fatal("zero Holder")
	}
	h.Store(sn)
	if h.Load() != sn {
		t.Fatal("Holder")
	}
	if !math.IsNaN(NoReading()) {
		t.Fatal("NoReading")
	}
}
