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
	SessionID string `json:"session_id"`
	OutpostID string `json:"outpost_id"`
	CreatedAt int64  `json:"created_at"`
	UpdatedAt int64  `json:"updated_at"`
}

// SessionSpec is what the session was asked to do. Secrets are write-only:
// only their names are shown.
type SessionSpec struct {
	Outpost     string            `json:"outpost"`
	Title       string            `json:"title"`
	Prompt      string            `json:"prompt"`
	Repos       []Repo            `json:"repos"`
	Agent       Agent             `json:"agent"`
	Env         map[string]string `json:"env"`
	SecretNames []string          `json:"secret_names"`
	Limits      Limits            `json:"limits"`
	// RemoteBinarySHA is the remote build the session pinned; null when
	// it runs its outpost's (see the queue entry's spec.remote_binary_sha).
	RemoteBinarySHA *string `json:"remote_binary_sha"`
}

// SessionStatus is the live state of a session.
type SessionStatus struct {
	Status       string `json:"status"`
	StatusDetail string `json:"status_detail"`
	// Reason says in a sentence why the session is in this state.
	Reason     string  `json:"reason"`
	AcceptorID *string `json:"acceptor_id"`
	// LastSeq is the sequence number of the last tool call whose result the
	// control plane holds.
	LastSeq   int64  `json:"last_seq"`
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
	URL  string `json:"url"`
	Name string `json:"name"`
	Ref  string `json:"ref,omitempty"`
}

// Agent says what drives the session.
type Agent struct {
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
	Tool string          `json:"tool"`
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
}

// Usage counts a session's model use.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	ModelCalls       int64 `json:"model_calls"`
}

// MessageRequest is the body of POST /v1/sessions/{id}/messages.
type MessageRequest struct {
	Text string `json:"text"`
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	Outpost string            `json:"outpost"`
	Title   string            `json:"title"`
	Prompt  string            `json:"prompt"`
	Repos   []Repo            `json:"repos"`
	Agent   Agent             `json:"agent"`
	Env     map[string]string `json:"env"`
	Secrets map[string]string `json:"secrets"`
	Limits  Limits            `json:"limits"`
	// RemoteBinarySHA pins the remote build that serves the session (6 to
	// 40 lower-case hex digits), over its outpost's pin.
	RemoteBinarySHA string `json:"remote_binary_sha,omitempty"`
}

// TerminateRequest is the optional body of POST /v1/sessions/{id}/terminate.
type TerminateRequest struct {
	Reason string `json:"reason"`
}

// SessionList is a page of sessions, newest first.
type SessionList struct {
	Items       []Session `json:"items"`
	Cursor      string    `json:"cursor"`
	HasNextPage bool      `json:"has_next_page"`
	Total       int       `json:"total"`
}

// Capabilities describe the machine a remote runs on.
type Capabilities struct {
	OS               string   `json:"os"`
	Arch             string   `json:"arch"`
	CPUs             int      `json:"cpus"`
	MemoryBytes      int64    `json:"memory_bytes"`
	Hostname         string   `json:"hostname"`
	Git              string   `json:"git"`
	ChromePath       string   `json:"chrome_path"`
	ChromeVersion    string   `json:"chrome_version"`
	FFmpeg           string   `json:"ffmpeg"`
	PasswordlessSudo bool     `json:"passwordless_sudo"`
	Tools            []string `json:"tools"`
	RemoteVersion    string   `json:"remote_version"`
}

// ToolResult answers a tool call made from outside (POST
// /v1/sessions/{id}/tools/{tool}, MCP): the call's result with the output
// the transcript holds for it.
type ToolResult struct {
	Seq    int64           `json:"seq"`
	OK     bool            `json:"ok"`
	Output string          `json:"output,omitempty"`
	Value  json.RawMessage `json:"value,omitempty"`
	Error  string          `json:"error,omitempty"`
}
