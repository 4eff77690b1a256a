//go:build race

package gateway

// raceEnabled: the race detector slows the gateway's own code (the push
// decoder's scan above all) about twentyfold; CPU bounds are scaled by it.
const raceEnabled = true
