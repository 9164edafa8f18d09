//go:build race

package robustness

const raceEnabled = true
