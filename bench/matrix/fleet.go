package matrix

import "fmt"

// FleetMax is the largest fleet a simfleet process (bench/cmd/simfleet)
// serves: 250 servers per /24, 256 of those in 127.10.0.0/16.
const FleetMax = 250 * 256

// FleetIP is the loopback address of model server i (from 0) of a
// simfleet process: 127.10.(i/250).(i%250+1). Hosts .0 and .251–.255 of
// each /24 are never used. simfleet listens on these addresses and the
// overhead matrix names them as the InferencePool's pod IPs, so both read
// them from here.
func FleetIP(i int) string {
	return fmt.Sprintf("127.10.%d.%d", i/250, i%250+1)
}
