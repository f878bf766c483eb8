package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/fleet"
)

// ServeDirect serves one session that someone else has claimed
// (direct-serve mode; the Kubernetes operator's pods run it): opts.SessionID
// with the claim's opts.ConnectToken and opts.GatewayURL, all three
// required. It starts the remote as Run does — under the spawn contract
// (fleet.SpawnEnv, the connect token only as OUTPOST_CONNECT_TOKEN), with the
// state dir DataDir/sessions/<id>, in the workspace Dir, with the build the
// session pins (directPin) or else the command every remote gets — passes
// its output through, and waits for it.
//
// It never calls the API, so it needs no Client and no account token (only
// the session's pin is asked of the gateway's server, with the connect
// token, when the claimer passed none):
// claiming, renewing and releasing stay with the claimer, and no presence
// heartbeats are sent. It returns nil when the remote exits 0 (the session
// ended or slept) and an error otherwise. When ctx ends the remote gets
// GracePeriod to finish before it is stopped, as in Run.
//
// The caller removes the connect token from its own environment before
// calling: ServeDirect runs programs (the capability probes) that inherit it.
func ServeDirect(ctx context.Context, opts Options) error {
	var missing []string
	for _, f := range []struct{ value, what string }{
		{opts.SessionID, "the session id (--session)"},
		{opts.ConnectToken, "the claim's connect token (" + api.EnvSessionToken.String() + ")"},
		{opts.GatewayURL, "the claim's gateway URL (" + api.EnvGatewayURL.String() + " or --gateway-url)"},
	} {
		if f.value == "" {
			missing = append(missing, f.what)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("serving a claimed session directly needs %s", strings.Join(missing, " and "))
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	w := &worker{opts: opts, log: opts.Logger, platform: HostPlatform()}
	// Which build serves the session is settled before anything starts: a
	// pin that cannot be learnt or downloaded starts nothing.
	claim := &api.QueueEntry{
		Metadata: api.QueueMetadata{SessionID: opts.SessionID},
		Status:   api.QueueStatus{GatewayURL: opts.GatewayURL, ConnectToken: opts.ConnectToken},
	}
	if pin, err := directPin(ctx, opts); err != nil {
		return fmt.Errorf("%w for session %s: %w", errStart, opts.SessionID, err)
	} else if pin != "" {
		claim.Spec.RemoteBinarySHA = &pin
	}
	if w.remotes, err = directResolver(opts, fleet.EntryPin(claim)); err != nil {
		return err
	}
	rc, err := fleet.RemoteOf(ctx, w.remotes, claim, nil)
	if err != nil {
		return fmt.Errorf("%w for session %s: %w", errStart, opts.SessionID, err)
	}
	if err := w.setupDesktop(); err != nil {
		return err
	}
	caps, err := w.detect(ctx)
	if err != nil {
		return err
	}
	if _, err := w.setupIsolation(ctx, caps); err != nil {
		return err
	}
	id := opts.SessionID
	log := w.log.With("session", id)
	log.Info("serving a session claimed elsewhere; the claimer keeps the claim", "dir", opts.Dir)
	lookup := fleet.LookupWithCAFile(os.LookupEnv, opts.CAFile)
	// A session claimed elsewhere comes without its queue entry: its
	// claimer enforces its network policy, or refuses it (fleet).
	p, err := w.start(claim, rc, func(stateDir string) []string { return fleet.SpawnEnv(claim, stateDir, lookup) }, nil)
	if err != nil {
		return fmt.Errorf("%w for session %s: %w", errStart, id, err)
	}
	defer p.logFile.Close()
	log.Info("remote started", "pid", p.cmd.Process.Pid, "state_dir", p.stateDir)

	// No claim to lose here: the claimer stops the remote by ending the
	// session or by claiming it elsewhere, which kills its connect token.
	exitErr := w.wait(context.WithoutCancel(ctx), p, ctx.Done(), nil, log)
	p.stdout.flush()
	p.stderr.flush()
	w.iso.endLeftovers(ctx, log)
	w.mirrors.afterSession(ctx, id, p.stateDir)
	log.Info("session done", "remote_exit", fleet.ExitString(exitErr), "duration", time.Since(p.startedAt).Round(time.Second))
	// A remote that exits 0 by itself saw its session end or sleep: nothing
	// of its state dir is needed here again (statedir.go).
	if err := pruneStateDir(p.stateDir, exitErr != nil || p.stopped); err != nil {
		log.Warn("cannot delete the session's state dir", "state_dir", p.stateDir, "err", err)
	}
	if exitErr == nil {
		return nil
	}
	logFile := filepath.Join(p.stateDir, "remote.log")
	if p.stopped {
		return fmt.Errorf("stopped the remote of session %s before the session ended (%s); its output is in %s", id, fleet.ExitString(exitErr), logFile)
	}
	return fmt.Errorf("remote for session %s exited before the session ended (%s); its output is in %s", id, fleet.ExitString(exitErr), logFile)
}

// directPin is the remote build the directly served session pins: the one
// its claimer passed (opts.RemoteBinarySHA, the public contract's
// DEVIN_WORKER_REMOTE_SHA), else the one its queue entry pins, asked of the
// gateway's server with the connect token. "" means none. A server too old
// to say is logged and taken as no pin; any other failure to ask is an
// error, so that no other build serves a pinned session.
func directPin(ctx context.Context, opts Options) (string, error) {
	log := opts.Logger.With("session", opts.SessionID)
	if opts.RemoteBinarySHA != "" {
		log.Info("the session's remote build, as its claimer passed it", "remote_binary_sha", opts.RemoteBinarySHA)
		return opts.RemoteBinarySHA, nil
	}
	pin, err := fleet.SessionPin(ctx, opts.GatewayURL, opts.SessionID, opts.ConnectToken, opts.CAFile)
	switch {
	case errors.Is(err, fleet.ErrNoSessionPin):
		log.Warn("cannot learn which remote build the session pins; serving it as unpinned (a claimer passes the pin in "+
			api.EnvWorkerRemoteSHA.Public+")", "err", err)
		return "", nil
	case err != nil:
		return "", fmt.Errorf("%w; a claimer may pass the session's spec.remote_binary_sha in %s", err, api.EnvWorkerRemoteSHA.Public)
	}
	if pin == "" {
		log.Info("the session pins no remote build, the server says")
	} else {
		log.Info("the session's remote build, as the server says", "remote_binary_sha", pin)
	}
	return pin, nil
}

// directResolver is the resolver of direct-serve: pin is the session's, so
// the worker's own default pin is no fallback; a pinned build is downloaded
// from the static base URL, else from the server's /dist/ (directBaseURL).
func directResolver(opts Options, pin string) (*dist.Resolver, error) {
	opts.RemoteBinarySHA = ""
	if pin != "" && opts.StaticBaseURL == "" {
		base, err := directBaseURL(opts)
		if err != nil {
			return nil, fmt.Errorf("where to download remote build %s from: %w", pin, err)
		}
		opts.StaticBaseURL = base
	}
	return newResolver(opts)
}
