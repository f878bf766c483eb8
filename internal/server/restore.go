package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/store"
)

// A session that resumes on another machine (queue entry kind resume) finds
// an empty workspace there. Its welcome lists the repositories to clone
// again — the arguments of every successful git_clone call, the planned
// clones of the spec's repos and those an agent made — and the remote
// reports how that went with a restored frame, recorded as a restore event.

// restoreList returns the arguments of the session's successful git_clone
// calls, in call order.
func (s *Server) restoreList(ctx context.Context, sessionID string) ([]api.GitCloneArgs, error) {
	calls, err := s.store.ListCalls(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list calls to restore: %w", err)
	}
	return cloneArgs(calls), nil
}

// cloneArgs picks the arguments of the successful git_clone calls.
func cloneArgs(calls []store.Call) []api.GitCloneArgs {
	var out []api.GitCloneArgs
	for _, c := range calls {
		if c.Tool != api.ToolGitClone || !c.Done || !c.OK {
			continue
		}
		var a api.GitCloneArgs
		if err := json.Unmarshal(c.Args, &a); err != nil || a.URL == "" || a.Name == "" {
			continue
		}
		out = append(out, a)
	}
	return out
}

// restoreNote is the part of a resume event's reason about what the new
// machine gets back.
func restoreNote(restore []api.GitCloneArgs) string {
	var names []string
	seen := map[string]bool{}
	for _, a := range restore {
		if !seen[a.Name] {
			seen[a.Name] = true
			names = append(names, a.Name)
		}
	}
	if len(names) == 0 {
		return "Uncommitted work and other files left on the old machine are lost."
	}
	return fmt.Sprintf("Its repositories (%s) are cloned again there, from their remotes, before the next call; uncommitted work and other files left on the old machine are lost.",
		strings.Join(names, ", "))
}

// restoreReason says in plain words how a restore went, and whether every
// repository is back.
func restoreReason(outcomes []api.RestoredRepo) (string, bool) {
	var restored, kept, failed []string
	for _, o := range outcomes {
		switch {
		case o.Error != "":
			failed = append(failed, fmt.Sprintf("%s (%s)", o.Name, o.Error))
		case o.Kept:
			kept = append(kept, o.Name)
		default:
			head := o.Head
			if len(head) > 7 {
				head = head[:7]
			}
			switch {
			case o.Ref != "" && head != "":
				restored = append(restored, fmt.Sprintf("%s (%s @ %s)", o.Name, o.Ref, head))
			case head != "":
				restored = append(restored, fmt.Sprintf("%s (%s)", o.Name, head))
			default:
				restored = append(restored, o.Name)
			}
		}
	}
	var parts []string
	if len(restored) > 0 {
		parts = append(parts, fmt.Sprintf("Restored %d %s on the new machine: %s.", len(restored), plural(len(restored), "repository", "repositories"), strings.Join(restored, ", ")))
	}
	if len(kept) > 0 {
		parts = append(parts, fmt.Sprintf("Already there and left as they were: %s.", strings.Join(kept, ", ")))
	}
	if len(failed) > 0 {
		parts = append(parts, fmt.Sprintf("Could not restore %s; calls that use %s will fail: %s.",
			plural(len(failed), "a repository", "repositories"), plural(len(failed), "it", "them"), strings.Join(failed, "; ")))
	}
	if len(parts) == 0 {
		return "No repositories to restore.", true
	}
	return strings.Join(parts, " "), len(failed) == 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// recordRestore records a remote's restored frame as a restore event.
func (s *Server) recordRestore(ctx context.Context, c *gateway.Conn, outcomes []api.RestoredRepo) {
	if len(outcomes) == 0 {
		return
	}
	reason, ok := restoreReason(outcomes)
	value, _ := json.Marshal(outcomes)
	ev := []api.Event{{Type: api.EventRestore, Time: s.now().UnixMilli(), AcceptorID: c.AcceptorID, Reason: reason, OK: &ok, Value: value}}
	sess, err := s.store.GetSession(ctx, c.SessionID)
	if err != nil || api.IsFinal(sess.Status) {
		return
	}
	if err := s.store.AppendEvents(ctx, c.SessionID, ev); err != nil {
		s.log.Warn("record restore", "session", c.SessionID, "err", err)
		return
	}
	s.topics.publish(c.SessionID, ev...)
}
