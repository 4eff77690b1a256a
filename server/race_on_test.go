//go:build race

package server

// raceOn makes the heaviest tests smaller under the race detector, which
// slows the engine's queue creation about fortyfold.
const raceOn = true
