package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
)

// TestLifecycleAnswer checks the one mapping of the state machine's
// refusals to HTTP: each kind's status and code, and the message bounded
// as every other error message is.
func TestLifecycleAnswer(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxEcho+50)
	tests := []struct {
		err    *lifecycle.Error
		status int
		code   string
		msg    string
	}{
		{&lifecycle.Error{Kind: lifecycle.ErrGone, Format: "Session %s is not in any queue.", Args: []any{"s1"}},
			http.StatusNotFound, api.CodeNotFound, "Session s1 is not in any queue."},
		{&lifecycle.Error{Kind: lifecycle.ErrConflict, Format: "Session %s is claimed by another acceptor.", Args: []any{"s1"}},
			http.StatusConflict, api.CodeConflict, "Session s1 is claimed by another acceptor."},
		{&lifecycle.Error{Kind: lifecycle.ErrAtCapacity, Format: "Session %s waits: %d of %d.", Args: []any{"s1", 2, 2}},
			http.StatusConflict, api.CodeOutpostAtCapacity, "Session s1 waits: 2 of 2."},
		{&lifecycle.Error{Kind: lifecycle.ErrEnded, Format: "Session %s ended: %s", Args: []any{"s1", long}},
			http.StatusConflict, api.CodeConflict, "Session s1 ended: " + long[:maxEcho] + "…"},
		{&lifecycle.Error{Format: "no kind"},
			http.StatusInternalServerError, api.CodeInternal, "The server failed to handle the request; see its log."},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			he := lifecycleAnswer(tt.err)
			if he.status != tt.status || he.code != tt.code || he.message != tt.msg {
				t.Errorf("answer = %d %s %q, want %d %s %q", he.status, he.code, he.message, tt.status, tt.code, tt.msg)
			}
		})
	}
	// The refusal itself keeps its whole text, for logs.
	if err := tests[3].err; !strings.HasSuffix(err.Error(), long) {
		t.Errorf("the refusal's own text was cut: %q", err.Error())
	}
}
