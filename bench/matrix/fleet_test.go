package matrix

import (
	"net/netip"
	"testing"
)

func TestFleetIP(t *testing.T) {
	for _, tc := range []struct {
		i    int
		want string
	}{
		{0, "127.10.0.1"},
		{249, "127.10.0.250"},
		{250, "127.10.1.1"},
		{999, "127.10.3.250"},
		{FleetMax - 1, "127.10.255.250"},
	} {
		if got := FleetIP(tc.i); got != tc.want {
			t.Errorf("FleetIP(%d) = %s, want %s", tc.i, got, tc.want)
		}
	}
	// Every address of a full fleet is distinct loopback.
	seen := make(map[string]bool, FleetMax)
	for i := range FleetMax {
		s := FleetIP(i)
		a, err := netip.ParseAddr(s)
		if err != nil || !a.IsLoopback() {
			t.Fatalf("FleetIP(%d) = %s: not a loopback address (%v)", i, s, err)
		}
		if seen[s] {
			t.Fatalf("FleetIP(%d) = %s repeats an earlier server's address", i, s)
		}
		seen[s] = true
	}
}
