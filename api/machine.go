package api

// Provisioning steps an orchestrator reports on a session's transcript
// (EventMachine), so a stuck or failed session says why.
const (
	// MachineStepCreate: the machine is being created.
	MachineStepCreate = "create"
	// MachineStepStart: the machine is up and the remote was started in it.
	MachineStepStart = "start"
	// MachineStepFailed: provisioning failed; the claim is released.
	MachineStepFailed = "failed"
	// MachineStepExit: the remote exited (ExitCode when known).
	MachineStepExit = "exit"
	// MachineStepTeardown: the machine was removed.
	MachineStepTeardown = "teardown"
)

// MachineSteps lists the valid provisioning steps.
var MachineSteps = []string{MachineStepCreate, MachineStepStart, MachineStepFailed, MachineStepExit, MachineStepTeardown}

// MachineEventRequest is the body of POST /v1/queue/{session}/events: a
// provisioning step of the session's machine, or a batch of the network
// decisions its egress policy made, or both, reported by the claim's
// holder.
type MachineEventRequest struct {
	// AcceptorID must hold the session's claim.
	AcceptorID string `json:"acceptor_id"`
	// Step is one of MachineSteps; it may be empty when Network is not.
	Step string `json:"step"`
	// Machine is the machine's name; Backend the kind of machine
	// (process, bwrap, docker, exec, …).
	Machine string `json:"machine,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Message says what happened, in plain words (at most 2,000
	// characters).
	Message  string `json:"message,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// Network holds network decisions to record on the transcript, one
	// EventNetwork each, at most MaxNetworkDecisions per request.
	Network []NetworkDecision `json:"network,omitempty"`
}

// MaxNetworkDecisions bounds MachineEventRequest.Network.
const MaxNetworkDecisions = 500

// NetworkDecision is one decision (or several equal ones, Count) of a
// session's egress policy, as the enforcing worker reports it. The fields
// mean what the EventNetwork fields of the same names do.
type NetworkDecision struct {
	// Time is when the (first grouped) decision was made, in Unix
	// milliseconds; 0 means when the server records it.
	Time int64 `json:"time_ms,omitempty"`
	// Decision is DecisionAllow or DecisionDeny.
	Decision string `json:"decision"`
	// Host is the name asked for, when known (at most 253 characters).
	Host string `json:"host,omitempty"`
	// Address is the destination IP address, when known.
	Address string `json:"address,omitempty"`
	// Port is the destination port, 0 to 65535.
	Port int `json:"port,omitempty"`
	// Protocol is ProtocolTCP, ProtocolUDP or ProtocolDNS.
	Protocol string `json:"protocol"`
	// Rule describes the deciding rule, or why the connection was denied
	// (at most 500 characters).
	Rule string `json:"rule,omitempty"`
	// BytesOut and BytesIn count what an allowed connection sent and
	// received.
	BytesOut int64 `json:"bytes_out,omitempty"`
	BytesIn  int64 `json:"bytes_in,omitempty"`
	// Count is how many equal decisions this one stands for; 0 means 1.
	Count int64 `json:"count,omitempty"`
}
