package api

import "strings"

// ReservedEnvName reports whether a session's env and secrets may not use
// name, because it belongs to Outpost: every OUTPOST_… name, and the public
// contract's spelling of each variable of the spawn contract and of the
// worker (DEVIN_OUTPOST_CONNECT_TOKEN and the like), which the remote and
// the worker read just as they read the Outpost spelling.
func ReservedEnvName(name string) bool {
	if strings.HasPrefix(name, "OUTPOST_") {
		return true
	}
	for _, list := range [][]EnvVar{SpawnEnv, WorkerEnv} {
		for _, v := range list {
			if v.Public != "" && v.Public == name {
				return true
			}
		}
	}
	return false
}
