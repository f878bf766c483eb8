package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/fleet"
)

// Between sessions a worker's workspace is cleared, so that nothing a
// session leaves there reaches the next one: before a session starts in
// a workspace where another session ran, every entry outside repos/ is
// deleted and every repository under repos/ is reset to a clean checkout
// with nothing of its own but its object store (repo.go), which stays as
// a cache for the next git_clone. The same session taking the workspace
// back (a resume on the same machine) finds it as it left it.
//
// The worker owns its workspace: it takes one that is empty (or holds only
// repos/) and records it in its data dir, so it never deletes files it did
// not see a session make; it refuses a workspace that holds other files,
// the root directory and the home directory. A worker serving one session
// (Options.SessionID) takes its workspace as it finds it and never clears
// it: its orchestrator prepared it for that session.

// workspaceRecordFile, in the data dir, names the workspace the worker
// owns and the session that ran there last.
const workspaceRecordFile = "workspace.json"

// reposDir is the workspace's directory of session repositories.
const reposDir = "repos"

// workspaceRecord is the content of workspaceRecordFile.
type workspaceRecord struct {
	Dir string `json:"dir"`
	// LastSession ran in Dir last; its files may still be there. Empty
	// when the workspace is clean.
	LastSession string `json:"last_session,omitempty"`
}

// ErrWorkspace is returned by Run when the workspace cannot be used or
// cleared between sessions.
var ErrWorkspace = errors.New("workspace unusable")

// workspaceError explains why the workspace cannot be used; it matches
// ErrWorkspace.
type workspaceError struct{ msg string }

func (e *workspaceError) Error() string { return e.msg }

func (e *workspaceError) Unwrap() error { return ErrWorkspace }

func workspaceErrorf(format string, args ...any) error {
	return &workspaceError{fmt.Sprintf(format, args...)}
}

// workspace is a worker's workspace and what the worker knows of it.
type workspace struct {
	dir     string // absolute, symlinks resolved
	dataDir string // absolute
	home    string // the home directory, never cleared
	keep    bool   // Options.KeepWorkspace: never cleared
	log     *slog.Logger
	lock    *os.File // nil when kept
	last    string   // workspaceRecord.LastSession
}

// openWorkspace creates the workspace when missing and, unless it is
// kept, checks that the worker may clear it, locks it and takes it over.
func openWorkspace(opts Options) (*workspace, error) {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	dir, err := filepath.EvalSymlinks(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolve workspace %s: %w", opts.Dir, err)
	}
	home, _ := os.UserHomeDir()
	ws := &workspace{dir: dir, dataDir: resolved(opts.DataDir), home: resolved(home), keep: opts.KeepWorkspace, log: opts.Logger}
	if opts.SessionID != "" && !ws.keep {
		// A worker started for one session (--session) serves the
		// directory its orchestrator prepared for that session (checked-out
		// repositories, restored checkpoints, dotfiles) and ends with it:
		// there is no next session to clear it for, and nothing there is
		// the worker's to delete.
		ws.keep = true
		ws.log.Info("serving one session in the workspace as it is; it is not cleared", "dir", dir)
	}
	if ws.keep {
		return ws, nil
	}
	if err := ws.checkClearable(); err != nil {
		return nil, err
	}
	if ws.lock, err = lockWorkspace(dir); err != nil {
		return nil, err
	}
	if err := ws.adopt(); err != nil {
		ws.close()
		return nil, err
	}
	return ws, nil
}

// close unlocks the workspace.
func (ws *workspace) close() {
	if ws != nil && ws.lock != nil {
		fleet.Unlock(ws.lock)
	}
}

// checkClearable refuses workspaces that must never be cleared.
func (ws *workspace) checkClearable() error {
	why, home := "", ws.home
	switch {
	case ws.dir == filepath.Dir(ws.dir):
		why = "it is the root directory"
	case home != "" && ws.dir == home:
		why = "it is the home directory"
	case home != "" && within(ws.dir, home):
		why = "it holds the home directory"
	case ws.dir == ws.dataDir:
		why = "it is the worker's data dir"
	}
	if why == "" {
		return nil
	}
	return workspaceErrorf("refusing the workspace %s: %s, and the worker clears its workspace between sessions (everything but the repositories' object stores under repos/). "+
		"Give the worker a directory of its own (--dir DIR), or pass --keep-workspace to keep files between sessions", ws.dir, why)
}

// lockWorkspace locks dir for this process, so that two workers given
// different data dirs never clear one workspace under each other.
func lockWorkspace(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	held, err := fleet.TryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock workspace %s: %w", dir, err)
	}
	if !held {
		f.Close()
		return nil, workspaceErrorf("the workspace %s is in use by another worker: two workers must never share one. Give each worker its own directory (--dir DIR)", dir)
	}
	return f, nil
}

// adopt reads the record of the workspace the worker owns. A workspace not
// recorded yet is taken when it holds nothing but repos/.
func (ws *workspace) adopt() error {
	var rec workspaceRecord
	b, err := os.ReadFile(filepath.Join(ws.dataDir, workspaceRecordFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &rec); err != nil {
			ws.log.Warn("ignoring an unreadable workspace record", "file", filepath.Join(ws.dataDir, workspaceRecordFile), "err", err)
			rec = workspaceRecord{}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read the workspace record: %w", err)
	}
	if rec.Dir == ws.dir {
		ws.last = rec.LastSession
		return nil
	}
	foreign, err := ws.clearable()
	if err != nil {
		return err
	}
	if len(foreign) > 0 {
		shown := foreign
		if len(shown) > 5 {
			shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(foreign)-5))
		}
		return workspaceErrorf("the workspace %s already holds files the worker did not see a session make (%s), and the worker clears its workspace between sessions. "+
			"Start the worker in an empty directory (--dir DIR), or pass --keep-workspace to keep files between sessions", ws.dir, strings.Join(shown, ", "))
	}
	ws.log.Info("taking over an empty workspace; it is cleared between sessions", "dir", ws.dir)
	return ws.save("")
}

// save records last as the session that ran last in the workspace.
func (ws *workspace) save(last string) error {
	b, err := json.Marshal(workspaceRecord{Dir: ws.dir, LastSession: last})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(ws.dataDir, 0o700); err != nil {
		return fmt.Errorf("create worker data dir: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(ws.dataDir, workspaceRecordFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save the workspace record: %w", err)
	}
	ws.last = last
	return nil
}

// clearable lists the workspace's top-level entries that clearing
// deletes: all but repos/ and the one holding the data dir.
func (ws *workspace) clearable() ([]string, error) {
	entries, err := os.ReadDir(ws.dir)
	if err != nil {
		return nil, fmt.Errorf("read workspace: %w", err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if name == reposDir && e.IsDir() {
			continue
		}
		if p := filepath.Join(ws.dir, name); p == ws.dataDir || within(p, ws.dataDir) {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}

// before readies the workspace for session id: cleared when another
// session ran there last. The record names id before its remote starts,
// so that a crash in the middle still leaves the next session a cleared
// workspace.
func (ws *workspace) before(ctx context.Context, id string) error {
	if ws == nil || ws.keep || ws.last == id {
		return nil
	}
	if ws.last != "" {
		ws.log.Info("clearing the workspace the previous session left", "previous_session", ws.last, "dir", ws.dir)
		if err := ws.clear(ctx); err != nil {
			return workspaceErrorf("cannot clear the workspace %s between sessions: %v. Fix it by hand (or pass --keep-workspace), then start the worker again", ws.dir, err)
		}
	}
	if err := ws.save(id); err != nil {
		return workspaceErrorf("%v", err)
	}
	return nil
}

// clear deletes everything outside repos/ and resets every repository
// in it (resetRepo); anything under repos/ that is not such a repository
// goes too. It never follows a symbolic link.
func (ws *workspace) clear(ctx context.Context) error {
	names, err := ws.clearable()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := removeAll(filepath.Join(ws.dir, name)); err != nil {
			return err
		}
	}
	repos := filepath.Join(ws.dir, reposDir)
	entries, err := os.ReadDir(repos)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", repos, err)
	}
	for _, e := range entries {
		path := filepath.Join(repos, e.Name())
		if !e.IsDir() {
			if err := removeAll(path); err != nil {
				return err
			}
			continue
		}
		if err := resetRepo(ctx, path); err != nil {
			ws.log.Info("removing a repository that cannot be reset to a clean checkout", "repo", path, "reason", err)
			if err := removeAll(path); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeAll is os.RemoveAll that first makes writable the directories a
// session left read-only. Symbolic links are removed, never followed.
func removeAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// within reports whether path is strictly inside dir.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// resolved is path made absolute with its symbolic links resolved, as far
// as it exists.
func resolved(path string) string {
	if path == "" {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	return abs
}
