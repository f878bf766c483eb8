// Package procguard keeps a process's secrets (API tokens, connect tokens)
// from other processes of the same user: it marks the process not dumpable,
// so they cannot read its /proc/PID/environ or attach to it, and it scrubs
// a token from the process's environment and command line once read, so
// neither the programs it starts nor a reader of /proc/PID/cmdline or
// /proc/PID/environ finds it there.
//
// The worker, the orchestrator and the remote use it.
package procguard

import "os"

// ScrubEnv removes the variables names from this process's environment, so
// no program it starts inherits them, and, on Linux, blanks their values in
// the environment block the process started with, which /proc/PID/environ
// shows. Read the values before calling it.
func ScrubEnv(names ...string) {
	for _, n := range names {
		_ = os.Unsetenv(n)
	}
	scrubEnvBlock(names)
}

// ScrubArg blanks every occurrence of value in the command line this
// process started with, which /proc/PID/cmdline and ps show, on Linux.
// os.Args shares that memory: a caller that keeps value (a flag parsed from
// os.Args) must hold a copy (strings.Clone) made before the call. Values
// shorter than 8 bytes are left alone, lest common words be blanked.
func ScrubArg(value string) {
	if len(value) < 8 {
		return
	}
	scrubArgBlock(value)
}
