package api

import (
	"fmt"
	"strings"
)

// EnvVar is an environment variable that goes by two names: Outpost's own
// (OUTPOST_…) and the public Outposts contract's (DEVIN_…), so that
// software written for that contract works unchanged. When both are set,
// Name wins. A variable is set when it is not empty.
type EnvVar struct {
	// Name is Outpost's name. Empty when only the public name exists.
	Name string
	// Public is the public contract's name. Empty when it has none.
	Public string
	// Meaning is one line for help texts and documentation.
	Meaning string
}

// Get returns the value of the first of v's names that getenv finds set.
func (v EnvVar) Get(getenv func(string) string) string {
	val, _ := v.Lookup(getenv)
	return val
}

// Lookup returns the value of the first of v's names that getenv finds
// set, and that name; "", "" when neither is set.
func (v EnvVar) Lookup(getenv func(string) string) (value, name string) {
	for _, n := range v.Names() {
		if val := getenv(n); val != "" {
			return val, n
		}
	}
	return "", ""
}

// Names returns v's names, Name first.
func (v EnvVar) Names() []string {
	var out []string
	for _, n := range []string{v.Name, v.Public} {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// String names v for messages: "OUTPOST_X (or DEVIN_X)".
func (v EnvVar) String() string {
	n := v.Names()
	switch len(n) {
	case 0:
		return "(unnamed variable)"
	case 1:
		return n[0]
	}
	return fmt.Sprintf("%s (or %s)", n[0], strings.Join(n[1:], ", "))
}

// The spawn contract: the whole interface between a claimer and the
// `outpost remote serve` it starts. Claimers pass the Outpost names; the
// remote reads both.
var (
	EnvGatewayURL = EnvVar{"OUTPOST_GATEWAY_URL", "DEVIN_OUTPOST_GATEWAY_URL",
		"the claim's status.gateway_url"}
	EnvConnectToken = EnvVar{"OUTPOST_CONNECT_TOKEN", "DEVIN_OUTPOST_CONNECT_TOKEN",
		"the claim's status.connect_token"}
	EnvSessionID = EnvVar{"OUTPOST_SESSION_ID", "DEVIN_OUTPOST_SESSION_ID",
		"the session the remote serves"}
	EnvStateDir = EnvVar{"OUTPOST_STATE_DIR", "DEVIN_REMOTE_STATE_DIR",
		"a state dir of its own per session"}
	EnvChromePath = EnvVar{"OUTPOST_CHROME_PATH", "DEVIN_CHROME_PATH",
		"Chrome or Chromium for the browser tools"}
	EnvDesktop = EnvVar{"OUTPOST_DESKTOP", "DEVIN_OUTPOST_DESKTOP",
		"true: the session gets a desktop (the X display in DISPLAY, else a virtual one started on first use)"}
	// EnvGitMirrors names a directory of shared bare mirrors on a
	// long-lived worker: git_clone clones with the mirror of its URL as a
	// reference, fetching only what is new from the upstream. A remote
	// inherits it from its worker and only reads it; the worker makes and
	// updates the mirrors after each session (internal/gitmirror).
	EnvGitMirrors = EnvVar{Name: "OUTPOST_GIT_MIRRORS",
		Meaning: "directory of shared bare git mirrors git_clone clones with (written by the worker only)"}
)

// RemoteExitRejected is the exit status of `outpost remote serve` when the
// gateway keeps refusing it: another remote process serves the session
// under the same claim, or the connect token is dead because the claim
// ended or moved. The claimer must then leave the claim alone (not release
// it): it belongs to whoever serves the session now. A gateway that accepts
// no protocol version the remote speaks (see ProtocolVersion) is not a
// refusal of this kind: the remote exits 3 and its claimer releases.
const RemoteExitRejected = 4

// SpawnEnv lists the spawn contract's variables. The first three are
// required and go together.
var SpawnEnv = []EnvVar{EnvGatewayURL, EnvConnectToken, EnvSessionID, EnvStateDir, EnvChromePath, EnvDesktop}

// The environment of `outpost worker start`. A flag beats both names.
var (
	// EnvOutpost is the outpost served; its public name is the one the
	// public orchestrators read (DEVIN_OUTPOST_ID).
	EnvOutpost = EnvVar{"OUTPOST_OUTPOST", "DEVIN_OUTPOST_ID",
		"outpost name or id to serve (--outpost)"}
	// EnvOutpostPoolID is the older public spelling of EnvOutpost, which
	// published orchestrators still set. It is deprecated: read only when
	// neither name of EnvOutpost is set, with a warning, and left out of
	// WorkerEnv so that help texts do not offer it.
	EnvOutpostPoolID = EnvVar{Public: "DEVIN_OUTPOST_POOL_ID",
		Meaning: "deprecated: outpost name or id to serve (--pool); set the outpost's other names instead"}
	EnvToken = EnvVar{"OUTPOST_TOKEN", "DEVIN_OUTPOSTS_TOKEN",
		"API token of the outposts.machine scope (--token)"}
	EnvTokenFile = EnvVar{"OUTPOST_TOKEN_FILE", "",
		"file holding the API token, readable by its owner only (--token-file)"}
	EnvServer = EnvVar{"OUTPOST_SERVER", "DEVIN_API_URL",
		"server URL, the origin only, e.g. https://outpost.example.com (--server)"}
	EnvAcceptorID = EnvVar{"OUTPOST_WORKER_ACCEPTOR_ID", "DEVIN_WORKER_ACCEPTOR_ID",
		"identity in claims (--acceptor-id)"}
	EnvWorkerDataDir = EnvVar{"OUTPOST_WORKER_DATA_DIR", "",
		"acceptor id file and per-session state dirs (--data-dir)"}
	// EnvSessionToken is a claim's connect token handed to a worker, which
	// then serves just that session (direct-serve mode). The remote gets
	// it as EnvConnectToken.
	EnvSessionToken = EnvVar{"OUTPOST_CONNECT_TOKEN", "DEVIN_REMOTE_SESSION_TOKEN",
		"a claim's connect token: serve --session directly, without the queue API"}
	EnvPTYBridgePort = EnvVar{"", "DEVIN_PTY_BRIDGE_PORT",
		"accepted and ignored: Outpost has no PTY bridge (--pty-bridge-port)"}
	EnvWorkerCacheDir = EnvVar{"OUTPOST_WORKER_CACHE_DIR", "DEVIN_WORKER_CACHE_DIR",
		"cache of downloaded remote binaries (--cache-dir); in direct-serve its parent is the data dir"}
	EnvWorkerStaticBaseURL = EnvVar{"OUTPOST_WORKER_STATIC_BASE_URL", "DEVIN_WORKER_STATIC_BASE_URL",
		"base URL remote binaries are downloaded from (--static-base-url)"}
	EnvWorkerRemoteSHA = EnvVar{"OUTPOST_WORKER_REMOTE_SHA", "DEVIN_WORKER_REMOTE_SHA",
		"remote binary version when the session pins none (--remote-binary-sha)"}
	EnvWorkerIsolation = EnvVar{"OUTPOST_WORKER_ISOLATION", "",
		"how session code is kept from the worker's credentials: auto, bwrap, user or none (--isolation)"}
	EnvWorkerDesktop = EnvVar{"OUTPOST_WORKER_DESKTOP", "",
		"give each session a desktop: auto, on or off (--desktop)"}
	EnvWorkerLabels = EnvVar{"OUTPOST_WORKER_LABELS", "",
		"labels the worker reports, KEY=VALUE separated by commas (--label)"}
)

// WorkerEnv lists the variables `outpost worker start` reads, EnvGatewayURL
// among them: the gateway used when a claim answer has none, and the
// claim's gateway in direct-serve mode.
var WorkerEnv = []EnvVar{
	EnvOutpost, EnvToken, EnvTokenFile, EnvServer, EnvAcceptorID, EnvWorkerDataDir, EnvGatewayURL, EnvSessionToken,
	EnvPTYBridgePort, EnvWorkerCacheDir, EnvWorkerStaticBaseURL, EnvWorkerRemoteSHA, EnvChromePath,
	EnvWorkerIsolation, EnvWorkerDesktop, EnvWorkerLabels,
}

// The environment of an orchestrator's exec backend commands
// (--provision-cmd, --teardown-cmd, --status-cmd), besides the spawn
// contract's; the remote those commands start sees whatever of it they
// pass on.
var (
	EnvPlatform = EnvVar{"OUTPOST_PLATFORM", "",
		"the outpost's platform (linux, macos, windows)"}
	EnvWorkspace = EnvVar{"OUTPOST_WORKSPACE", "",
		"the machine's directory under the orchestrator's state dir, removed at teardown"}
	EnvMachineName = EnvVar{"OUTPOST_MACHINE_NAME", "",
		"outpost-<session id>: the name to give the VM or container"}
	EnvBinary = EnvVar{"OUTPOST_BIN", "",
		"the outpost binary the orchestrator runs; start the remote with \"$OUTPOST_BIN\" remote serve"}
	EnvRequirements = EnvVar{"OUTPOST_REQUIREMENTS", "",
		"the session's requirements as JSON (labels, cpus, memory_gib, gpus, gpu_memory_gib, gpu_model); unset when it has none: provision a machine that meets them"}
)

// ExecBackendEnv lists the variables an exec backend's commands get
// besides SpawnEnv's.
var ExecBackendEnv = []EnvVar{EnvPlatform, EnvWorkspace, EnvMachineName, EnvBinary, EnvRequirements}

// The log settings of the long-running commands (outpost server, worker,
// orchestrate, and the outpost-operator program). A flag beats them.
var (
	EnvLogLevel  = EnvVar{Name: "OUTPOST_LOG_LEVEL", Meaning: "log level of long-running commands (--log-level)"}
	EnvLogFormat = EnvVar{Name: "OUTPOST_LOG_FORMAT", Meaning: "log format of long-running commands (--log-format)"}
)
