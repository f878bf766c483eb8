package api

// SuspendRequest is the optional body of POST /v1/sessions/{id}/suspend:
// what the suspend does about a call still running on the machine (it
// snapshots the workspace only once no call runs) and whether the request
// waits for the outcome.
type SuspendRequest struct {
	// WaitS is how long, in seconds, the suspend waits for running calls
	// to finish; past it the suspend is withdrawn (the session goes on
	// running) and answered 409. 0 means the server's bound, 600.
	WaitS int `json:"wait_s,omitempty"`
	// Interrupt stops the running calls instead of waiting for them: each
	// ends with an error result saying it was interrupted by the suspend,
	// which the agent reads when the session resumes. Script sessions
	// refuse it (a step cut short would fail the script).
	Interrupt bool `json:"interrupt,omitempty"`
	// Async answers 202 at once with the suspend's SuspendProgress and a
	// Location header, GET /v1/sessions/{id}/suspend, to follow it; the
	// header "Prefer: respond-async" asks the same.
	Async bool `json:"async,omitempty"`
}

// MaxSuspendWaitS bounds SuspendRequest.WaitS.
const MaxSuspendWaitS = 600

// States of a suspend (SuspendProgress.State).
const (
	// SuspendWaiting: running calls (Calls) must finish (or, with
	// Interrupt, stop) before the snapshot.
	SuspendWaiting = "waiting_for_calls"
	// SuspendSnapshotting: the machine archives and uploads its workspace.
	SuspendSnapshotting = "snapshotting"
	// SuspendDone: the session is suspended.
	SuspendDone = "suspended"
	// SuspendFailed: the last suspend failed (Error says why); the session
	// goes on running.
	SuspendFailed = "failed"
	// SuspendNone: no suspend is in progress and none failed since the
	// session last ran.
	SuspendNone = "none"
)

// SuspendProgress is where a suspend of a session stands: the answer of
// GET /v1/sessions/{id}/suspend and of an asynchronous suspend (202).
type SuspendProgress struct {
	SessionID string `json:"session_id"`
	// State is one of the Suspend… states.
	State string `json:"state"`
	// Calls are the calls the suspend waits for (state waiting_for_calls).
	Calls []RunningCall `json:"calls,omitempty"`
	// Interrupt is set when the suspend stops the running calls.
	Interrupt bool `json:"interrupt,omitempty"`
	// WaitS is how long the suspend waits for the calls, in seconds.
	WaitS int `json:"wait_s,omitempty"`
	// StartedMS is when the suspend began, in Unix milliseconds.
	StartedMS int64 `json:"started_ms,omitempty"`
	// Error says why the last suspend failed (state failed).
	Error string `json:"error,omitempty"`
}

// RunningCall is a call that runs on a session's machine.
type RunningCall struct {
	Seq  int64  `json:"seq"`
	Tool string `json:"tool"`
	// Target is what the call acts on, as the transcript shows it (the
	// command of exec, the path of a file tool); "" when none.
	Target string `json:"target,omitempty"`
	// StartedMS is when the call was made, in Unix milliseconds.
	StartedMS int64 `json:"started_ms"`
}
