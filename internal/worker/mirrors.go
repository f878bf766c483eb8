package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gitmirror"
	"github.com/outpost-sh/outpost/internal/sandbox"
)

// The shared git mirrors (OUTPOST_GIT_MIRRORS) are read by every session's
// clones and written by the worker alone, outside any sandbox: a session
// that could write one would run its program in the next session that
// clones the repository. Sandboxes see the directory read-only, in user
// isolation it stays the worker's, and after each session the worker makes
// or updates the mirrors of the URLs the session cloned (package
// gitmirror).

// mirrorTimeout bounds the making or update of one mirror.
const mirrorTimeout = 10 * time.Minute

// mirrorQueue is how many sessions' mirror updates may wait; more are
// dropped (the next session that clones the URL asks again).
const mirrorQueue = 8

// setupMirrors readies the git mirrors directory, when there is one, for
// sessions that read it and never write it, and returns its path ("" for
// none).
func (w *worker) setupMirrors() (string, error) {
	root := os.Getenv(api.EnvGitMirrors.Name)
	if root == "" {
		return "", nil
	}
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("%s=%s: give the git mirrors directory as an absolute path", api.EnvGitMirrors.Name, root)
	}
	root = filepath.Clean(root)
	if w.iso.name() != string(IsolationNone) && (sandbox.Under(root, w.opts.Dir) || sandbox.Under(w.opts.Dir, root)) {
		return "", fmt.Errorf("%s=%s: the git mirrors directory must be outside the workspace %s and not hold it: session code writes the workspace, and must not write mirrors",
			api.EnvGitMirrors.Name, root, w.opts.Dir)
	}
	if w.iso.name() == string(IsolationUser) && w.iso.user != nil {
		// Session code runs as the user outside a sandbox: in a directory
		// of its own it could replace the mirrors directory with its own.
		if d := w.iso.user.ancestorOf(root); d != "" {
			return "", fmt.Errorf("%s=%s: the git mirrors directory must not lie in %s, which the run-as user %s owns: session code could put mirrors of its own in its place",
				api.EnvGitMirrors.Name, root, d, w.iso.user.name)
		}
	}
	if err := gitmirror.Prepare(root); err != nil {
		return "", err
	}
	return root, nil
}

// mirrorJob is what one session asks of the mirrors: the URLs it cloned,
// each with the session's token for its host ("" for none).
type mirrorJob struct {
	session string
	urls    []string
	tokens  []string
}

// mirrorer makes and updates the worker's git mirrors after sessions, one
// at a time. A nil *mirrorer (no mirrors directory) does nothing.
type mirrorer struct {
	root string
	log  *slog.Logger
	wg   sync.WaitGroup

	mu     sync.Mutex // guards the following
	jobs   chan mirrorJob
	closed bool
}

// newMirrorer returns the mirrorer of root, nil when root is "".
func newMirrorer(root string, log *slog.Logger) *mirrorer {
	if root == "" {
		return nil
	}
	return &mirrorer{root: root, log: log}
}

// start updates mirrors in the background, as sessions end, until close
// or ctx ends.
func (m *mirrorer) start(ctx context.Context) {
	if m == nil {
		return
	}
	m.jobs = make(chan mirrorJob, mirrorQueue)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for job := range m.jobs {
			if ctx.Err() == nil {
				m.update(ctx, job)
			}
		}
	}()
}

// close stops the background updates and waits for the one under way.
func (m *mirrorer) close() {
	if m == nil {
		return
	}
	m.mu.Lock()
	if m.jobs != nil && !m.closed {
		close(m.jobs)
	}
	m.closed = true
	m.mu.Unlock()
	m.wg.Wait()
}

// afterSession reads what the session of stateDir asks of the mirrors,
// at once (the state dir may not outlive the session), and has it done in
// the background, or now when start was not called.
func (m *mirrorer) afterSession(ctx context.Context, session, stateDir string) {
	if m == nil {
		return
	}
	job, err := readMirrorJob(session, stateDir)
	if err != nil {
		m.log.Warn("git mirrors: cannot read the URLs the session cloned", "session", session, "err", err)
		return
	}
	if len(job.urls) == 0 {
		return
	}
	m.mu.Lock()
	now := m.jobs == nil && !m.closed
	if m.jobs != nil && !m.closed {
		select {
		case m.jobs <- job:
		default:
			m.log.Warn("git mirrors: too many updates waiting; skipping the session's", "session", session)
		}
	}
	m.mu.Unlock()
	if now {
		m.update(ctx, job)
	}
}

// readMirrorJob reads the URLs the session of stateDir cloned, and its
// tokens for them.
func readMirrorJob(session, stateDir string) (mirrorJob, error) {
	urls, err := gitmirror.Wanted(stateDir)
	if err != nil {
		return mirrorJob{}, err
	}
	job := mirrorJob{session: session, urls: urls}
	for _, u := range urls {
		job.tokens = append(job.tokens, gitmirror.TokenFor(stateDir, u))
	}
	return job, nil
}

// update makes or updates the mirror of each URL of job.
func (m *mirrorer) update(ctx context.Context, job mirrorJob) {
	for i, u := range job.urls {
		if ctx.Err() != nil {
			return
		}
		start := time.Now()
		uctx, cancel := context.WithTimeout(ctx, mirrorTimeout)
		err := gitmirror.Update(uctx, m.root, u, job.tokens[i])
		cancel()
		if err != nil {
			m.log.Warn("git mirror not updated", "session", job.session, "url", u, "err", err)
			continue
		}
		m.log.Info("git mirror updated", "session", job.session, "url", u, "duration", time.Since(start).Round(time.Millisecond))
	}
}
