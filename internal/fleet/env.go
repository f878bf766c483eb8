package fleet

import (
	"runtime"
	"slices"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/steptrace"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// EnvCAFile is the PEM file of CA certificates the remote trusts besides
// the system's when it dials a wss:// gateway; passed through as is.
const EnvCAFile = tlsconfig.EnvCAFile

// passThrough lists the variables of the consumer's own environment a remote
// inherits under the same name. The agent's shell inherits the remote's
// environment, so nothing else (above all no API token) is passed.
var passThrough = []string{
	EnvCAFile,
	"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR",
	"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", api.EnvGitMirrors.Name,
	// A trace of dispatch steps, set only to debug (steptrace).
	steptrace.Env,
}

// passThroughVars are the spawn contract's optional variables a remote
// inherits from the consumer's environment under either name; the remote
// gets them under the Outpost name.
var passThroughVars = []api.EnvVar{api.EnvChromePath, api.EnvDesktop}

// windowsPassThrough are the system variables Windows programs need to run
// at all.
var windowsPassThrough = []string{
	"SystemRoot", "WINDIR", "ComSpec", "PATHEXT", "SystemDrive", "TEMP", "TMP",
	"USERPROFILE", "USERNAME", "APPDATA", "LOCALAPPDATA", "ProgramData",
	"ProgramFiles", "ProgramFiles(x86)", "ALLUSERSPROFILE", "HOMEDRIVE", "HOMEPATH",
	"NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE",
}

// EnvEgressProxy, in a consumer's environment, is the proxy URL its
// remotes must reach names through (a Kubernetes session pod whose
// NetworkPolicy allows only the operator's egress proxy): the remote gets
// it as HTTPS_PROXY, HTTP_PROXY, ALL_PROXY (each in both cases), and the
// consumer's NO_PROXY. Other consumers pass no proxy variable on, so a
// host's own proxy settings never steer a session's traffic.
const EnvEgressProxy = "OUTPOST_EGRESS_PROXY"

// proxyVars are the variables EnvEgressProxy becomes.
var proxyVars = []string{"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"}

// SpawnEnv returns the environment of a remote serving the claimed entry:
// the spawn contract's variables under their Outpost names (OUTPOST_…,
// which the remote reads as it reads the public names), OUTPOST_DESKTOP=true
// when the claim says spec.desktop (the outpost gives its sessions a
// desktop), and the few system ones found by lookup (usually
// os.LookupEnv), sorted.
func SpawnEnv(claim *api.QueueEntry, stateDir string, lookup func(string) (string, bool)) []string {
	env := []string{
		api.EnvGatewayURL.Name + "=" + claim.Status.GatewayURL,
		api.EnvConnectToken.Name + "=" + claim.Status.ConnectToken,
		api.EnvSessionID.Name + "=" + claim.Metadata.SessionID,
		api.EnvStateDir.Name + "=" + stateDir,
	}
	getenv := func(k string) string { v, _ := lookup(k); return v }
	for _, v := range passThroughVars {
		val := v.Get(getenv)
		if v == api.EnvDesktop && claim.Spec.Desktop {
			// The session's outpost gives its sessions a desktop.
			val = "true"
		}
		if val != "" {
			env = append(env, v.Name+"="+val)
		}
	}
	names := passThrough
	if runtime.GOOS == "windows" {
		names = append(slices.Clone(passThrough), windowsPassThrough...)
	}
	for _, k := range names {
		if v := getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	if proxy := getenv(EnvEgressProxy); proxy != "" {
		for _, k := range proxyVars {
			env = append(env, k+"="+proxy)
		}
		for _, k := range []string{"NO_PROXY", "no_proxy"} {
			if v := getenv(k); v != "" {
				env = append(env, k+"="+v)
			}
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
