package api

import "encoding/json"

// Event types of a session transcript.
const (
	EventStatus             = "status"
	EventClaim              = "claim"
	EventRelease            = "release"
	EventRemoteConnected    = "remote_connected"
	EventRemoteDisconnected = "remote_disconnected"
	EventCall               = "call"
	EventOutput             = "output"
	EventResult             = "result"
	EventResume             = "resume"
	EventEnd                = "end"
	// EventMessage is a conversation message: the prompt and messages of
	// the user, and the model's answers with the tool calls they ask for.
	EventMessage = "message"
	// EventArtifact records an artifact stored by a call.
	EventArtifact = "artifact"
	// EventMachine is a provisioning step of the session's machine,
	// reported by the orchestrator that holds the claim.
	EventMachine = "machine"
	// EventRestore records how a remote that took over a resumed session
	// cloned its repositories again: Reason says it in plain words, OK is
	// false when a repository could not be restored.
	EventRestore = "restore"
	// EventSnapshot records a suspend's snapshot of the workspace: Value
	// holds the SnapshotInfo (size, checksum, files, duration), Reason says
	// where it is kept, OK is false (and Error says why) when the snapshot
	// failed and the session went on running. A restore of it is an
	// EventRestore whose Value holds the remote's SnapshotRestored.
	EventSnapshot = "snapshot"
	// EventNetwork is one network decision of the session's egress
	// policy, or several equal ones grouped (Count): Decision, Host when
	// known, Address, Port, Protocol, the Rule that decided, and for
	// allowed connections the bytes each way.
	EventNetwork = "network"
	// EventNetworkRequest is a network access request of the agent
	// (NetworkRequest, its call CallSeq): one event when it asks, State
	// pending, and one when a person answers it.
	EventNetworkRequest = "network_request"
	// EventModelRetry is a model call that failed for a reason that may
	// pass (a connection error, a 5xx, a 429) and is tried again: Reason
	// says it in plain words, with the wait; Error is the provider's error.
	EventModelRetry = "model_retry"
	// EventApproval (approval.go) is an approval rule's hold or refusal
	// of a tool call, or a decision on it.
)

// Network decisions (Event.Decision, NetworkDecision.Decision).
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// Network protocols (Event.Protocol, NetworkDecision.Protocol).
const (
	ProtocolTCP = "tcp"
	ProtocolUDP = "udp"
	ProtocolDNS = "dns"
)

// Message roles on EventMessage events.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// ToolCallRef is a tool call a model asked for, on an assistant message.
// Arguments are kept as the model wrote them, valid JSON or not.
type ToolCallRef struct {
	// ID is the model's id of the call.
	ID string `json:"id"`
	// Tool is the tool the model asked for.
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// CallSeq is the session call that runs it.
	CallSeq int64 `json:"call_seq"`
}

// Event is one entry of a session's durable, ordered transcript.
//
// Output past a call's transcript cap is written to a file beside the
// transcript; such chunks reach live followers with Seq 0 and Spilled set,
// and are not replayed.
type Event struct {
	// Seq numbers the session's events from 1, without gaps; it is the
	// `after` of the events API and the SSE id of the event stream.
	Seq       int64  `json:"seq"`
	SessionID string `json:"session_id"`
	// Time is when the event happened, in Unix milliseconds.
	Time int64 `json:"time_ms"`
	// Type is one of the Event… constants; it says which of the fields
	// below are set.
	Type string `json:"type"`

	// Status events: the session's new Status and StatusDetail (see
	// SessionStatus), and Reason, a sentence saying why. Reason also says
	// what happened on claim, release, resume, end and machine events.
	Status       string `json:"status,omitempty"`
	StatusDetail string `json:"status_detail,omitempty"`
	Reason       string `json:"reason,omitempty"`

	// Claim and release events.
	AcceptorID string `json:"acceptor_id,omitempty"`

	// Remote connected.
	Capabilities *Capabilities `json:"capabilities,omitempty"`

	// Message events.
	Role string `json:"role,omitempty"`
	// Seen is, on an assistant message, the last transcript event the model
	// had seen when it answered.
	Seen      int64         `json:"seen,omitempty"`
	ToolCalls []ToolCallRef `json:"tool_calls,omitempty"`
	Usage     *Usage        `json:"usage,omitempty"`

	// Call, output and result events. CallSeq is the call's sequence
	// number, Tool and Args the call (on call events). Output events carry
	// a chunk of Text on Stream (StreamStdout, StreamStderr). Result events
	// carry OK, the ExitCode of exec, the tool's result Value (its result
	// type as JSON) and the Error of a failed call.
	CallSeq int64           `json:"call_seq,omitempty"`
	Tool    string          `json:"tool,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
	Stream  string          `json:"stream,omitempty"`
	Text    string          `json:"text,omitempty"`
	Spilled bool            `json:"spilled,omitempty"`
	// DroppedBytes, on the output event that ends a call's output, is how
	// much of it the server dropped past its caps: kept nowhere.
	DroppedBytes int64           `json:"dropped_bytes,omitempty"`
	OK           *bool           `json:"ok,omitempty"`
	ExitCode     *int            `json:"exit_code,omitempty"`
	Value        json.RawMessage `json:"value,omitempty"`
	Error        string          `json:"error,omitempty"`

	// Artifact events: an artifact stored by call CallSeq.
	Artifact *Artifact `json:"artifact,omitempty"`

	// Machine events: Step (MachineStep*), the machine's name and backend;
	// Reason says what happened and ExitCode how a remote exited.
	Step    string `json:"step,omitempty"`
	Machine string `json:"machine,omitempty"`
	Backend string `json:"backend,omitempty"`

	// Network events: the Decision (DecisionAllow, DecisionDeny) on a
	// connection to Host (the name it asked for, when known: TLS SNI, HTTP
	// Host, DNS question) at Address and Port over Protocol (ProtocolTCP,
	// ProtocolUDP, ProtocolDNS); Rule describes the policy rule that
	// allowed it, or why it was denied. BytesOut and BytesIn count what an
	// allowed connection sent and received; Count, when above 1, says the
	// event groups that many equal decisions.
	Decision string `json:"decision,omitempty"`
	Host     string `json:"host,omitempty"`
	Address  string `json:"address,omitempty"`
	Port     int    `json:"port,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Rule     string `json:"rule,omitempty"`
	BytesOut int64  `json:"bytes_out,omitempty"`
	BytesIn  int64  `json:"bytes_in,omitempty"`
	Count    int64  `json:"count,omitempty"`
	// Network request events: the request and its state.
	NetworkRequest *NetworkRequest `json:"network_request,omitempty"`
	// Approval events (EventApproval): the held call's approval, its
	// state, who decided and why.
	Approval *Approval `json:"approval,omitempty"`

	// Desktop events (EventDesktop): the Action (DesktopTakeControl,
	// DesktopHandBack) and the Actor, the id of the API token that took
	// or handed back control.
	Action string `json:"action,omitempty"`
	Actor  string `json:"actor,omitempty"`
}

// EventList is the answer of GET /v1/sessions/{id}/events.
type EventList struct {
	Items []Event `json:"items"`
	// Next is the `after` value for the next page.
	Next int64 `json:"next"`
	// HasNextPage is true when more events than the page held exist
	// already.
	HasNextPage bool `json:"has_next_page"`
}
