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
// provisioning step of the session's machine, reported by the claim's
// holder.
type MachineEventRequest struct {
	// AcceptorID must hold the session's claim.
	AcceptorID string `json:"acceptor_id"`
	// Step is one of MachineSteps.
	Step string `json:"step"`
	// Machine is the machine's name; Backend the kind of machine
	// (process, bwrap, docker, exec, …).
	Machine string `json:"machine,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Message says what happened, in plain words (at most 2,000
	// characters).
	Message  string `json:"message,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
}
