package api

import "encoding/json"

// Session statuses (status.status), as the public sessions API has them.
const (
	StatusNew       = "new"
	StatusClaimed   = "claimed"
	StatusRunning   = "running"
	StatusExit      = "exit"
	StatusError     = "error"
	StatusSuspended = "suspended"
	StatusResuming  = "resuming"
)

// Session status details (status.status_detail).
const (
	DetailWorking            = "working"
	DetailWaitingForUser     = "waiting_for_user"
	DetailFinished           = "finished"
	DetailInactivity         = "inactivity"
	DetailUserRequest        = "user_request"
	DetailUsageLimitExceeded = "usage_limit_exceeded"
	DetailError              = "error"
	DetailWaitingForMachine  = "waiting_for_machine"
	DetailOutpostDeleted     = "outpost_deleted"
)

// Agent kinds (spec.agent.kind).
const (
	AgentScript   = "script"
	AgentLLM      = "llm"
	AgentExternal = "external"
)

// IsFinal reports whether a session status is one a session never leaves.
func IsFinal(status string) bool { return status == StatusExit || status == StatusError }

// Session is one agent session.
type Session struct {
	Metadata SessionMetadata `json:"metadata"`
	Spec     SessionSpec     `json:"spec"`
	Status   SessionStatus   `json:"status"`
}

// SessionMetadata identifies a session.
type SessionMetadata struct {
	// SessionID is the session's id, "devin-…" (sessions created before
	// that shape keep their "ses_…").
	SessionID string `json:"session_id"`
	// OutpostID is the id of the outpost whose queue serves it.
	OutpostID string `json:"outpost_id"`
	// CreatedAt and UpdatedAt are Unix seconds.
	CreatedAt int64 `json:"created_at"`
	UpdatedAt int64 `json:"updated_at"`
}

// SessionSpec is what the session was asked to do. Secrets are write-only:
// only their names are shown.
type SessionSpec struct {
	// Outpost is the outpost's name.
	Outpost string `json:"outpost"`
	// Title names the session for people.
	Title string `json:"title"`
	// Prompt is the task, given to an llm agent as the first user message.
	Prompt string `json:"prompt"`
	// Repos are cloned into the workspace's repos/<name> before the agent
	// starts.
	Repos []Repo `json:"repos"`
	// Agent says what drives the session.
	Agent Agent `json:"agent"`
	// Env is the environment the session's tools get, on top of the
	// remote's. Names for which ReservedEnvName holds are refused.
	Env map[string]string `json:"env"`
	// SecretNames are the names of the session's secrets; their values are
	// never returned.
	SecretNames []string `json:"secret_names"`
	// UseSecrets are the names of its outpost's stored secrets the session
	// asked for (CreateSessionRequest.UseSecrets); they are among
	// SecretNames.
	UseSecrets []string `json:"use_secrets,omitempty"`
	// Limits bound the session.
	Limits Limits `json:"limits"`
	// RemoteBinarySHA is the remote build the session pinned; null when
	// it runs its outpost's (see the queue entry's spec.remote_binary_sha).
	RemoteBinarySHA *string `json:"remote_binary_sha"`
	// Priority orders the outpost's queue: higher priorities are claimed
	// first, FIFO within one. 0 by default.
	Priority int `json:"priority"`
	// NetworkPolicy is the session's effective network policy: its own
	// when it has one, else its outpost's; null (omitted) when the session
	// is unrestricted. It is what the queue entry's spec.network_policy
	// shows.
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
	// NetworkPolicyOwn is true when NetworkPolicy is the session's own
	// rather than its outpost's.
	NetworkPolicyOwn bool `json:"network_policy_own,omitempty"`
	// Desktop is the size of the session's desktop, on a machine that
	// gives sessions one (Capabilities.Desktop); null (omitted) means the
	// default, 1280×800.
	Desktop *DesktopSize `json:"desktop,omitempty"`
	// Requirements are the session's own, as given; null (omitted) when it
	// states none. A session without its own takes its outpost's.
	Requirements *Requirements `json:"requirements,omitempty"`
	// ApprovalRules are the session's own approval rules, added to its
	// outpost's (ApprovalRule); omitted when it has none.
	ApprovalRules []ApprovalRule `json:"approval_rules,omitempty"`
	// ForkedFrom is the id of the session this one was forked from
	// (POST /v1/sessions/{id}/fork): it started from that session's
	// workspace and conversation. Omitted for a session that is no fork.
	ForkedFrom string `json:"forked_from,omitempty"`
}

// UpdateSessionRequest is the body of PATCH /v1/sessions/{session}.
type UpdateSessionRequest struct {
	// NetworkPolicy replaces the session's own network policy; it takes
	// effect on a running session's new connections at once. JSON null
	// removes it, so the session follows its outpost's again. Without
	// ScopeNetworkAdmin it must only narrow the outpost's (see
	// CreateSessionRequest.NetworkPolicy). The field is required.
	NetworkPolicy *NetworkPolicy `json:"network_policy"`
}

// Priorities are at least MinPriority and at most MaxPriority.
const (
	MinPriority = -1000000
	MaxPriority = 1000000
)

// SessionStatus is the live state of a session.
type SessionStatus struct {
	// Status is one of the Status… constants; IsFinal tells the ones a
	// session never leaves.
	Status string `json:"status"`
	// StatusDetail refines it: one of the Detail… constants.
	StatusDetail string `json:"status_detail"`
	// Reason says in a sentence why the session is in this state.
	Reason string `json:"reason"`
	// AcceptorID is the worker or orchestrator holding the session's
	// claim; null when nobody holds it.
	AcceptorID *string `json:"acceptor_id"`
	// Worker is the acceptor (worker or orchestrator) that claimed the
	// session last, kept after the claim and the session end — what ran
	// it; omitted before any claim. GET /v1/sessions?worker= filters by it.
	Worker string `json:"worker,omitempty"`
	// LastSeq is the sequence number of the last tool call whose result the
	// control plane holds.
	LastSeq int64 `json:"last_seq"`
	// StartedAt is when a remote first connected, EndedAt when the session
	// reached a final status (Unix seconds); null until then.
	StartedAt *int64 `json:"started_at"`
	EndedAt   *int64 `json:"ended_at"`
	// Capabilities are those reported by the remote serving the session.
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// Usage counts model calls and tokens of llm sessions.
	Usage Usage `json:"usage"`
	// ArtifactsPrunedAt is when the server's artifact retention deleted
	// the session's artifacts (Unix seconds); absent while they are kept.
	ArtifactsPrunedAt *int64 `json:"artifacts_pruned_at,omitempty"`
}

// Repo is a git repository cloned into repos/<name> at session start.
type Repo struct {
	// URL is what git clones: https://…, ssh://… or file://….
	URL string `json:"url"`
	// Name is the directory under repos/.
	Name string `json:"name"`
	// Ref is a branch, tag or commit to check out; "" is the default
	// branch.
	Ref string `json:"ref,omitempty"`
}

// Agent says what drives the session.
type Agent struct {
	// Kind is AgentScript, AgentLLM or AgentExternal.
	Kind string `json:"kind"`
	// StopOnError says whether a script ends at its first failed step (a
	// tool error, or an exec whose exit code is not 0); unset means true.
	// With false every step runs, and the session still ends in error
	// when one failed. Use StopsOnError to read it.
	StopOnError *bool `json:"stop_on_error,omitempty"`
	// Steps are a script's tool calls.
	Steps []Step `json:"steps,omitempty"`

	// Model names the model of an llm agent; "" means the server's default.
	Model string `json:"model,omitempty"`
	// Temperature and TopP are an llm agent's sampling parameters; unset
	// leaves the provider's defaults.
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	// MaxSteps bounds an llm agent's model calls; 0 means 50.
	MaxSteps int `json:"max_steps,omitempty"`
	// MaxOutputTokens caps each model answer; 0 means the provider's default.
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// Interactive makes an llm agent wait for the user
	// (status_detail waiting_for_user) when the model answers without tool
	// calls, instead of finishing.
	Interactive bool `json:"interactive,omitempty"`
}

// StopsOnError reports whether a script ends at its first failed step:
// StopOnError, true when unset.
func (a Agent) StopsOnError() bool { return a.StopOnError == nil || *a.StopOnError }

// Step is one tool call of a script agent.
type Step struct {
	// Tool is a tool name (ToolExec, ToolReadFile, …; see ToolNames).
	Tool string `json:"tool"`
	// Args are the tool's arguments, the JSON of its argument type (for
	// exec, ExecArgs).
	Args json.RawMessage `json:"args"`
	// ContinueOnError lets the script go on when this step fails, and does
	// not count its failure against the session, which can still finish.
	ContinueOnError bool `json:"continue_on_error,omitempty"`
}

// Limits bound a session.
type Limits struct {
	// MaxDurationS ends the session this long after it started running.
	MaxDurationS int64 `json:"max_duration_s,omitempty"`
	// MaxTokens ends an llm session once its prompt and completion tokens
	// reach it.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// IdleS ends a session that waits for the user this long; 0 means 3600.
	IdleS int64 `json:"idle_s,omitempty"`
	// MaxAttempts is how many attempts the session gets (claims that end
	// without it ending: its machine died or could not be provisioned)
	// before it ends in error, over its outpost's max_attempts; 0 means
	// the outpost's. At most MaxAttemptsLimit.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// SuspendAfterIdleS suspends an llm session that has waited for its
	// user this long (its workspace snapshot kept, its machine released);
	// the user's next message resumes it. 0 never suspends it. Set it below
	// IdleS, which still ends the session.
	SuspendAfterIdleS int64 `json:"suspend_after_idle_s,omitempty"`
	// MaxCostUSD stops an llm session once its estimated model cost
	// (usage.cost_usd, from the server's price table) reaches it; 0 means
	// no limit.
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	// MaxToolCalls is how many tool calls an llm session's model may ask
	// for; the session stops when the model asks for more, or before its
	// next model call once it has made them all. 0 means no limit.
	MaxToolCalls int64 `json:"max_tool_calls,omitempty"`
	// OnLimit is what reaching max_tokens, max_cost_usd or max_tool_calls
	// does: OnLimitSuspend (the default, "": suspended when the session can
	// be, ended otherwise) or OnLimitEnd.
	OnLimit string `json:"on_limit,omitempty"`
}

// Usage counts a session's model use.
type Usage struct {
	// PromptTokens and CompletionTokens are the tokens the model provider
	// counted, summed over ModelCalls calls.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	ModelCalls       int64 `json:"model_calls"`
	// ToolCalls counts the tool calls the model asked for; omitted when 0.
	ToolCalls int64 `json:"tool_calls,omitempty"`
	// CostUSD is the estimated cost of the model calls in US dollars, from
	// the server's price table (outpost server --prices); omitted when 0
	// (also for models the table does not price).
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// MessageRequest is the body of POST /v1/sessions/{id}/messages.
type MessageRequest struct {
	// Text is the user's message.
	Text string `json:"text"`
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	// Outpost is the name or id of the outpost whose queue serves the
	// session.
	Outpost string `json:"outpost"`
	// Title, Prompt, Repos, Agent, Env and Limits become the session's
	// spec (SessionSpec).
	Title  string            `json:"title"`
	Prompt string            `json:"prompt"`
	Repos  []Repo            `json:"repos"`
	Agent  Agent             `json:"agent"`
	Env    map[string]string `json:"env"`
	// Secrets become environment of the session's tools, like Env (the
	// same names are reserved), but are stored sealed, never returned, and
	// redacted from the transcript.
	Secrets map[string]string `json:"secrets"`
	Limits  Limits            `json:"limits"`
	// UseSecrets names stored secrets of the outpost (PUT
	// /v1/outposts/{outpost}/secrets/{name}) whose values the session gets
	// among its secrets, as if given in Secrets; a name also in Secrets
	// takes that value instead. A name the outpost lacks is refused.
	UseSecrets []string `json:"use_secrets,omitempty"`
	// RemoteBinarySHA pins the remote build that serves the session (6 to
	// 40 lower-case hex digits), over its outpost's pin.
	RemoteBinarySHA string `json:"remote_binary_sha,omitempty"`
	// Priority is the session's place in its outpost's queue: higher is
	// claimed first, FIFO within one; MinPriority to MaxPriority, 0 by
	// default.
	Priority int `json:"priority,omitempty"`
	// NetworkPolicy is the session's own network policy, replacing its
	// outpost's; omitted to follow the outpost's. It may only narrow the
	// outpost's policy (every rule within one of the outpost's) unless
	// the token holds ScopeNetworkAdmin.
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
	// Desktop sizes the session's desktop (MinDesktopSize to
	// MaxDesktopSize pixels each way); omitted means 1280×800. The desktop
	// itself starts on first use, on machines that give sessions one.
	Desktop *DesktopSize `json:"desktop,omitempty"`
	// Requirements say what machine the session needs; omitted to take
	// its outpost's (OutpostSpec.Requirements). Only a worker that meets
	// them is given the session by a server-assigned claim.
	Requirements *Requirements `json:"requirements,omitempty"`
	// ApprovalRules are added to the outpost's rules for this session's
	// tool calls; they can only tighten them (ApprovalRule). At most
	// MaxApprovalRules.
	ApprovalRules []ApprovalRule `json:"approval_rules,omitempty"`
}

// TerminateRequest is the optional body of POST /v1/sessions/{id}/terminate.
type TerminateRequest struct {
	// Reason goes onto the session's status; "" gives a default.
	Reason string `json:"reason"`
}

// SessionList is a page of sessions, newest first.
type SessionList struct {
	Items []Session `json:"items"`
	// Cursor is passed back as the cursor query parameter for the next
	// page, while HasNextPage is true.
	Cursor      string `json:"cursor"`
	HasNextPage bool   `json:"has_next_page"`
	// Total counts the matching sessions on all pages.
	Total int `json:"total"`
}

// Capabilities describe the machine a remote runs on.
type Capabilities struct {
	// OS and Arch are Go's names (linux, darwin, windows; amd64, arm64).
	OS   string `json:"os"`
	Arch string `json:"arch"`
	// CPUs and MemoryBytes are what the machine has.
	CPUs        int    `json:"cpus"`
	MemoryBytes int64  `json:"memory_bytes"`
	Hostname    string `json:"hostname"`
	// Git, FFmpeg and ChromeVersion are the versions found; "" when
	// missing, and the tools that need them answer a clear error.
	Git           string `json:"git"`
	ChromePath    string `json:"chrome_path"`
	ChromeVersion string `json:"chrome_version"`
	FFmpeg        string `json:"ffmpeg"`
	// PasswordlessSudo is whether session code may run sudo without a
	// password.
	PasswordlessSudo bool `json:"passwordless_sudo"`
	// Tools are the tool names the remote serves.
	Tools []string `json:"tools"`
	// RemoteVersion is the remote's build.
	RemoteVersion string `json:"remote_version"`
	// NetworkPolicy is whether the worker serving the machine enforces a
	// session's network policy (spec.network_policy); one that does not
	// never claims a restricted session.
	NetworkPolicy bool `json:"network_policy"`
	// Desktop is whether the remote gives its session a desktop (an X
	// display, virtual or real) and so serves the computer tool.
	Desktop bool `json:"desktop,omitempty"`
	// LiveDesktop is whether the remote streams its desktop to live
	// viewers and takes a person's input (FrameDesktopStream,
	// FrameDesktopInput, FrameDesktopControl). A server sends those frames
	// only to a remote that says so.
	LiveDesktop bool `json:"live_desktop,omitempty"`
	// GPUs are the machine's GPUs, as nvidia-smi or rocm-smi report
	// them; empty when it has none or neither tool is installed.
	GPUs []GPU `json:"gpus,omitempty"`
	// CPUModel is the processor's model name; "" when unknown.
	CPUModel string `json:"cpu_model,omitempty"`
	// DiskFreeBytes is the free space of the file system of the worker's
	// workspace; 0 when unknown.
	DiskFreeBytes int64 `json:"disk_free_bytes,omitempty"`
	// OSVersion names the operating system's release ("Ubuntu 24.04.1
	// LTS"); "" when unknown.
	OSVersion string `json:"os_version,omitempty"`
}

// ToolResult answers a tool call made from outside (POST
// /v1/sessions/{id}/tools/{tool}, MCP): the call's result with the output
// the transcript holds for it.
type ToolResult struct {
	// Seq is the call's sequence number in the session.
	Seq int64 `json:"seq"`
	// OK is false when the tool failed; Error then says why.
	OK bool `json:"ok"`
	// Output is the call's output as the transcript holds it.
	Output string `json:"output,omitempty"`
	// Value is the tool's result type as JSON (for exec, ExecResult).
	Value json.RawMessage `json:"value,omitempty"`
	Error string          `json:"error,omitempty"`
}
