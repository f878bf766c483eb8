//go:build !linux

package machine

// cpuModel is unknown here: only Linux's /proc is read.
func cpuModel() string { return "" }

// osVersion is unknown here: only Linux's os-release is read.
func osVersion() string { return "" }
