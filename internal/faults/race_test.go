//go:build race

package faults

// raceEnabled reports a build with the race detector.
const raceEnabled = true
