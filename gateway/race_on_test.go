//go:build race

package gateway

// raceEnabled: the race detector slows the gateway's own code (the push
// decoder's scan above all) about twentyfold, and by how much depends on
// the machine's load: CPU bounds are checked only without it.
const raceEnabled = true
