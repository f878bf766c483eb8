package api

// ForkRequest is the body of POST /v1/sessions/{session}/fork: Count new
// sessions start from the session's workspace and conversation as they
// are now. The answer is 201 with a SessionList of the new sessions.
type ForkRequest struct {
	// Count is how many sessions to create, 1 to MaxForkCount.
	Count int `json:"count"`
	// Prompt, when set, is a new user message each new session's
	// conversation goes on with.
	Prompt string `json:"prompt,omitempty"`
}

// MaxForkCount is the most sessions one fork creates.
const MaxForkCount = 10

// EventFork records a fork on the transcript: on the session forked, which
// sessions it was forked into; on each new session, which session and
// point of its transcript it started from (the events before are the
// parent's).
const EventFork = "fork"
