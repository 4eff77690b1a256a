//go:build !race

package client

// raceOn: see race_on_test.go.
const raceOn = false
