//go:build race

package client

// raceOn: the race detector is on; its instrumentation allocates where the
// plain build does not (crypto/rand's reads), so allocation counts are
// checked without it.
const raceOn = true
