package remote

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/redact"
)

// restoreTimeout bounds the restore of one repository.
const restoreTimeout = 10 * time.Minute

// A session that resumes on another machine gets, in its welcome, the
// git_clone calls it made (api.Frame.Restore). The remote clones each
// repository again with the git_clone tool's own code and credentials,
// before it runs any call, so the next call finds repos/<name> in place.
// A repository already on this machine (the same workspace taking the
// session back) is left as it is. A failed restore is reported and the
// session goes on; calls that need the repository then fail on their own.
// A session suspended with a snapshot (protocol version 3) has its whole
// workspace restored from it first (see snapshot.go); its repositories are
// then already here and kept.

// startRestore runs the restore the welcome f asks for in the background,
// once per remote process: first its snapshot (f.Snapshot, protocol
// version 3 on), then the repositories of f.Restore still missing (a
// snapshot brings its repositories back, and those are kept). s.restored
// is closed when it is done (at once when there is nothing to restore);
// calls wait for it. One restored frame reports both. Called with s.mu
// held, after the welcome's secrets and git credentials are in place.
func (s *session) startRestore(f api.Frame) {
	if s.restoreStarted {
		return
	}
	s.restoreStarted = true
	if s.restored == nil { // a session not made by newSession (tests)
		s.restored = make(chan struct{})
	}
	inPlace := s.takeInPlace() // before any call: calls change the workspace
	snap := f.Snapshot
	if s.version < api.SnapshotsSince {
		snap = nil
	}
	list := f.Restore
	if len(list) == 0 && snap == nil {
		close(s.restored)
		return
	}
	env := mergeEnv(s.baseEnv, s.env, s.secrets)
	set := s.secretSet
	ctx := s.callCtx
	if ctx == nil {
		ctx = context.Background()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(s.restored)
		report := api.Frame{Type: api.FrameRestored}
		if snap != nil {
			info := s.restoreSnapshot(ctx, *snap, inPlace)
			info.Error = set.String(info.Error)
			report.SnapshotRestored = &info
		}
		if len(list) > 0 {
			report.Restored = s.restore(ctx, list, env, set) // nil when every repository was here
		}
		if report.Restored == nil && report.SnapshotRestored == nil {
			return // nothing to tell
		}
		s.out.pushFrame(report)
	}()
}

// restore clones list again and returns one outcome per repository name,
// in order of first appearance; nil when every repository was already on
// this machine.
func (s *session) restore(ctx context.Context, list []api.GitCloneArgs, env []string, set *redact.Set) []api.RestoredRepo {
	probe := s.restoreEnv(env, set)
	present := map[string]bool{}
	for _, a := range list {
		if _, seen := present[a.Name]; !seen && repoNameRE.MatchString(a.Name) {
			present[a.Name] = isGitRepo(ctx, &git{c: probe}, filepath.Join(s.opts.WorkDir, "repos", a.Name))
		}
	}
	var outcomes []api.RestoredRepo
	idx := map[string]int{}
	worked := false
	for _, a := range list {
		o := api.RestoredRepo{Name: a.Name, URL: set.String(a.URL), Ref: a.Ref}
		if present[a.Name] {
			o.Kept = true
		} else {
			worked = true
			o.Head, o.Error = s.restoreOne(ctx, a, env, set)
			if o.Error != "" {
				s.log.Warn("restore a repository", "name", a.Name, "err", o.Error)
			} else {
				s.log.Info("restored a repository", "name", a.Name, "ref", a.Ref, "head", o.Head)
			}
		}
		if i, ok := idx[a.Name]; ok {
			outcomes[i] = o // a later clone of the same name decides
		} else {
			idx[a.Name] = len(outcomes)
			outcomes = append(outcomes, o)
		}
	}
	if !worked {
		return nil
	}
	return outcomes
}

// restoreOne runs one clone as the git_clone tool does and returns the
// head or why it failed.
func (s *session) restoreOne(ctx context.Context, a api.GitCloneArgs, env []string, set *redact.Set) (head, errText string) {
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	c := s.restoreEnv(env, set)
	v, err := runGitClone(ctx, c, mustJSON(a))
	c.flush()
	if err != nil {
		msg := err.Error()
		if last := lastLine(c.tail.String()); last != "" && !strings.Contains(msg, last) {
			msg += ": " + last
		}
		return "", set.String(msg)
	}
	if r, ok := v.(api.GitCloneResult); ok {
		return r.Head, ""
	}
	return "", ""
}

// restoreEnv is the call environment of a restore: like a call's, but its
// output goes to a private outbox nobody sends (only its tail is kept, for
// errors), since it belongs to no call.
func (s *session) restoreEnv(env []string, set *redact.Set) *callEnv {
	c := newCallEnv(s, api.Frame{}, env, set)
	discard := newOutbox()
	c.stdout.out, c.stderr.out = discard, discard
	c.log = s.log.With("restore", true)
	return c
}

// lastLine is the last non-empty line of s, without the "$ git …" lines
// the git helper writes.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range slices.Backward(lines) {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "$ git ") {
			return l
		}
	}
	return ""
}

// waitRestored waits until the restore is done or ctx ends.
func (s *session) waitRestored(ctx context.Context) {
	select {
	case <-s.restored:
	case <-ctx.Done():
	}
}
