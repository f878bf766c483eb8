package worker

import (
	"runtime"
	"slices"

	"github.com/outpost-sh/outpost/internal/api"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// Variables of the spawn contract: the whole interface between a claimer and
// the remote it starts.
const (
	EnvGatewayURL   = "OUTPOST_GATEWAY_URL"
	EnvConnectToken = "OUTPOST_CONNECT_TOKEN"
	EnvSessionID    = "OUTPOST_SESSION_ID"
	EnvStateDir     = "OUTPOST_STATE_DIR"
	EnvChromePath   = "OUTPOST_CHROME_PATH"
	// EnvCAFile is the PEM file of CA certificates the remote trusts
	// besides the system's when it dials a wss:// gateway.
	EnvCAFile = tlsconfig.EnvCAFile
)

// passThrough lists the variables of the worker's own environment a remote
// inherits. The agent's shell inherits the remote's environment, so nothing
// else (above all no API token) is passed.
var passThrough = []string{
	EnvChromePath, EnvCAFile,
	"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR",
	"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "OUTPOST_DESKTOP", "OUTPOST_GIT_MIRRORS",
}

// windowsPassThrough are the system variables Windows programs need to run
// at all.
var windowsPassThrough = []string{
	"SystemRoot", "WINDIR", "ComSpec", "PATHEXT", "SystemDrive", "TEMP", "TMP",
	"USERPROFILE", "USERNAME", "APPDATA", "LOCALAPPDATA", "ProgramData",
	"ProgramFiles", "ProgramFiles(x86)", "ALLUSERSPROFILE", "HOMEDRIVE", "HOMEPATH",
	"NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE",
}

// RemoteEnv returns the environment of a remote serving the claimed entry:
// the contract's variables and the few system ones found by lookup (usually
// os.LookupEnv), sorted.
func RemoteEnv(claim *api.QueueEntry, stateDir string, lookup func(string) (string, bool)) []string {
	env := []string{
		EnvGatewayURL + "=" + claim.Status.GatewayURL,
		EnvConnectToken + "=" + claim.Status.ConnectToken,
		EnvSessionID + "=" + claim.Metadata.SessionID,
		EnvStateDir + "=" + stateDir,
	}
	names := passThrough
	if runtime.GOOS == "windows" {
		names = append(slices.Clone(passThrough), windowsPassThrough...)
	}
	for _, k := range names {
		if v, ok := lookup(k); ok && v != "" {
			env = append(env, k+"="+v)
		}
	}
	slices.Sort(env)
	return env
}

// LookupWithCAFile returns lookup answering OUTPOST_CA_FILE with caFile when
// it is set: a claimer given its CA file by flag passes it on to its
// remotes as if it were in its environment. caFile must be absolute, as
// the remote runs in another directory.
func LookupWithCAFile(lookup func(string) (string, bool), caFile string) func(string) (string, bool) {
	if caFile == "" {
		return lookup
	}
	return func(k string) (string, bool) {
		if k == EnvCAFile {
			return caFile, true
		}
		return lookup(k)
	}
}
