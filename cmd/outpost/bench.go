package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleetsim"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// NewCmdBench returns `outpost bench`, the load tools.
func NewCmdBench(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a server under a simulated load",
	}
	cmd.AddCommand(NewCmdBenchFleet(f, nil))
	return cmd
}

// BenchFleetOptions are the settings of `outpost bench fleet`.
type BenchFleetOptions struct {
	f        *Factory
	sim      fleetsim.Options
	callRate string
	create   string
	output   string
	frame    string
	local    bool
	database string
	replicas int
	metrics  string
	pprof    string
	json     bool
}

// NewCmdBenchFleet returns `outpost bench fleet`. runF replaces the run in
// tests.
func NewCmdBenchFleet(f *Factory, runF func(context.Context, *BenchFleetOptions) error) *cobra.Command {
	opts := &BenchFleetOptions{f: f}
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Simulate a fleet of workers, running sessions and followers against a server",
		Long: `Simulate a fleet against an Outpost server and report what it measured.

N workers connect and watch a new outpost's queue, heartbeat and claim
sessions exactly as 'outpost worker start' does, over real HTTP; each
claimed session is served by a simulated remote in this process that speaks
the real gateway protocol (hello, output frames, results, reconnects) and
runs nothing. Sessions (external agent) are created at --create-rate; once a
session's remote is connected, an agent calls a tool through the server at
--call-rate, each call streaming --output bytes; --followers follow the
transcripts. After --duration every session is ended and the report shows
the latencies (claim, dispatch: create → first call running, tool call round
trip, and the same for the calls sent while every session ran, follower
lag), throughput, errors, whether every call ran exactly once
(each call carries an id that the remotes count), and the server's CPU and
memory per worker and per session from its /metrics.

Point it at a server with --server and an admin token (it creates an outpost
and machine tokens there, and removes them at the end unless --keep), or
give --local to start a server of this build on loopback with a fresh
SQLite database, or on --database postgres://…; --replicas N starts N
replicas of it on that PostgreSQL database. Replicas without a balancer in
front are given as several URLs, comma-separated, in --server. Either way
the workers, the creator, the agents and the followers are spread round
robin over them, as a balancer would, and the server's CPU and memory are
summed over their /metrics. A server whose certificate is signed by a
private CA needs --ca-file.
Exits 1 when a call was lost or ran twice.`,
		Example: `  outpost bench fleet --local --workers 100 --sessions 10 --duration 20s
  outpost bench fleet --local --database postgres://outpost@127.0.0.1/fleet --workers 1000 --sessions 100
  outpost bench fleet --local --replicas 3 --database postgres://outpost@127.0.0.1/fleet --workers 10000 --sessions 1000
  outpost bench fleet --server https://outpost.example.com --token $ADMIN_TOKEN \
      --workers 10000 --sessions 1000 --call-rate 1/s --output 4KiB --followers 50 --create-rate 50/s --duration 60s --json`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runBenchFleet(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	s := &opts.sim
	fl.IntVar(&s.Workers, "workers", 100, "simulated workers, each watching the queue and heartbeating")
	fl.IntVar(&s.Sessions, "sessions", 10, "sessions created and run, each by one worker (at most --workers)")
	fl.StringVar(&opts.callRate, "call-rate", "1/s", "tool calls per running session, as N/s, N/m or N (per second)")
	fl.StringVar(&opts.output, "output", "4KiB", "output each call streams before its result (B, KiB, MiB)")
	fl.StringVar(&opts.frame, "frame", "4KiB", "size of the output frames a call's output is sent in")
	fl.IntVar(&s.Followers, "followers", 0, "transcript followers, spread round robin over the sessions")
	fl.StringVar(&opts.create, "create-rate", "10/s", "sessions created per second (N/s, N/m or N)")
	fl.DurationVar(&s.Duration, "duration", time.Minute, "how long sessions are created and driven")
	fl.DurationVar(&s.Idle, "idle", 5*time.Second, "how long the connected, idle workers are measured before the first session (negative: not at all)")
	fl.DurationVar(&s.ReconnectEvery, "reconnect-every", 0, "make each remote drop its gateway connection about this often and reconnect (0: never)")
	fl.DurationVar(&s.Heartbeat, "heartbeat", 0, "worker heartbeat interval (0: as the server asks)")
	fl.IntVar(&s.WorkersPerToken, "workers-per-token", 200, "workers sharing one machine token (the server bounds streams per token)")
	fl.StringVar(&opts.metrics, "metrics-url", "", "where the server's metrics are read, comma-separated for several replicas, summed (default: each server's /metrics; a server with --metrics-listen serves them there only: give that address, /metrics added when the URL has no path)")
	fl.StringVar(&s.Outpost, "outpost", "", "outpost to serve, created when missing (default: a new fleetsim-<random>)")
	fl.DurationVar(&s.Drain, "drain", time.Minute, "how long ending the sessions and releasing the claims may take")
	fl.DurationVar(&s.ProgressEvery, "progress", 5*time.Second, "interval of the progress line on standard error")
	fl.BoolVar(&opts.local, "local", false, "start a server of this build on loopback for the run (SQLite, or --database)")
	fl.StringVar(&opts.database, "database", "", "with --local: the PostgreSQL URL the server uses")
	fl.IntVar(&opts.replicas, "replicas", 1, "with --local: server replicas started on --database (PostgreSQL), each on its own loopback port")
	fl.BoolVar(&s.Keep, "keep", false, "keep the outpost and the machine tokens the run created (default: removed at the end)")
	fl.StringVar(&opts.pprof, "pprof-listen", "", "with --local: the address the server serves its runtime profiles on (its --pprof-listen), e.g. 127.0.0.1:6060")
	fl.BoolVar(&opts.json, "json", false, "print the report as JSON (this command's --output is the output size, so not -o json)")
	return cmd
}

func runBenchFleet(ctx context.Context, opts *BenchFleetOptions) error {
	f := opts.f
	s := opts.sim
	var err error
	if s.CallRate, err = parseRate("--call-rate", opts.callRate); err != nil {
		return err
	}
	if s.CreateRate, err = parseRate("--create-rate", opts.create); err != nil {
		return err
	}
	if s.OutputBytes, err = parseSize("--output", opts.output); err != nil {
		return err
	}
	if s.FrameBytes, err = parseSize("--frame", opts.frame); err != nil {
		return err
	}
	if s.FrameBytes == 0 {
		return usageErrorf("--frame must be at least 1 byte")
	}
	// What the simulator would refuse anyway, refused before a server is
	// started for the run, as the usage errors they are.
	switch {
	case s.Workers < 1:
		return usageErrorf("--workers %d: give at least 1", s.Workers)
	case s.Sessions < 0 || s.Followers < 0:
		return usageErrorf("--sessions and --followers must not be negative")
	case s.Sessions > s.Workers:
		return usageErrorf("--sessions %d is more than --workers %d: each running session needs a worker of its own", s.Sessions, s.Workers)
	case s.Duration <= 0 || s.Drain <= 0 || s.ProgressEvery <= 0:
		return usageErrorf("--duration, --drain and --progress must be positive durations, such as 60s")
	case s.WorkersPerToken < 1:
		return usageErrorf("--workers-per-token %d: give at least 1", s.WorkersPerToken)
	case s.ReconnectEvery < 0 || s.Heartbeat < 0:
		return usageErrorf("--reconnect-every and --heartbeat must not be negative (0: never, and as the server asks)")
	}
	if opts.database != "" && !opts.local {
		return usageErrorf("--database needs --local: a server given with --server has its own database")
	}
	if opts.replicas < 1 {
		return usageErrorf("--replicas must be at least 1")
	}
	if opts.replicas > 1 && !opts.local {
		return usageErrorf("--replicas needs --local: give the URLs of a deployment's replicas, comma-separated, in --server")
	}
	if opts.replicas > 1 && !isPostgresURL(opts.database) {
		return usageErrorf("--replicas %d needs --database postgres://…: replicas share one PostgreSQL database, SQLite is one process's", opts.replicas)
	}
	if opts.metrics != "" {
		if s.MetricsURLs, err = splitURLs("--metrics-url", opts.metrics); err != nil {
			return err
		}
		// The address of --metrics-listen, as the help says, is enough.
		for i, u := range s.MetricsURLs {
			if p, _ := url.Parse(u); p.Path == "" {
				s.MetricsURLs[i] = u + "/metrics"
			}
		}
	}
	if opts.pprof != "" && !opts.local {
		return usageErrorf("--pprof-listen needs --local: a server given with --server has its own settings")
	}
	// Before any server is started for the run: a fleet this process
	// cannot hold would otherwise fail part-way with "too many open files".
	if err := s.CheckFiles(); err != nil {
		return usageErrorf("%v", err)
	}
	if opts.local {
		if f.Server != "" {
			return usageErrorf("give --server or --local, not both")
		}
		if f.CAFile != "" {
			return usageErrorf("--ca-file is for an https --server: the servers --local starts speak plain http on loopback")
		}
		srvs, err := startLocalServers(ctx, opts.replicas, opts.database, opts.pprof, f.IO.ErrOut)
		if err != nil {
			return err
		}
		defer stopLocalServers(srvs)
		for _, srv := range srvs {
			s.Servers = append(s.Servers, srv.url)
		}
		s.Token = srvs[0].token
	} else {
		server, token, err := f.Endpoint()
		if err != nil {
			return err
		}
		if s.Servers, err = splitURLs("--server", server); err != nil {
			return err
		}
		s.Token = token
		if s.Token == "" {
			return usageErrorf("an admin token is required: pass --token, set OUTPOST_TOKEN, or use --local")
		}
		ca, err := f.TrustedCAFile()
		if err != nil {
			return err
		}
		if ca != "" {
			if s.TLS, err = tlsconfig.Client(ca); err != nil {
				return fmt.Errorf("%w (given by --ca-file or %s)", err, envCAFile.Name)
			}
		}
	}
	s.Progress = f.IO.ErrOut
	rep, err := fleetsim.Run(ctx, s)
	if rep != nil {
		if opts.json || f.JSON() {
			if perr := printJSON(f.IO.Out, rep); perr != nil {
				return perr
			}
		} else {
			rep.Print(f.IO.Out)
		}
	}
	if ctx.Err() != nil {
		// Stopped by a signal: the report covers the run up to then, and
		// the exit says it is not a whole run (a cancellation would read
		// as a clean end).
		return codeError{exitFailed, errors.New("fleet simulation stopped by a signal before the run's end; the report covers the run until then")}
	}
	if err != nil {
		return fmt.Errorf("fleet simulation: %w", err)
	}
	if rep.Calls.Lost > 0 || rep.Calls.Duplicated > 0 {
		return codeError{exitFailed, fmt.Errorf("fleet simulation: %d calls answered but never run, %d calls run more than once", rep.Calls.Lost, rep.Calls.Duplicated)}
	}
	return nil
}

// isPostgresURL reports whether u names a PostgreSQL database.
func isPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// splitURLs reads a comma-separated list of absolute http(s) URLs.
func splitURLs(flag, v string) ([]string, error) {
	var out []string
	for u := range strings.SplitSeq(v, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, usageErrorf("%s %q: want absolute http:// or https:// URLs, comma-separated", flag, u)
		}
		u = strings.TrimSuffix(u, "/")
		if slices.Contains(out, u) {
			return nil, usageErrorf("%s names %s twice: each server's figures would be counted twice", flag, u)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, usageErrorf("%s is empty: want a URL, or several comma-separated", flag)
	}
	return out, nil
}

// parseRate reads N/s, N/m or N (per second).
func parseRate(flag, v string) (float64, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(v), "/")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 {
		return 0, usageErrorf("%s %q: want a positive rate such as 1/s, 30/m or 0.5", flag, v)
	}
	switch unit {
	case "", "s":
		return n, nil
	case "m":
		return n / 60, nil
	case "h":
		return n / 3600, nil
	}
	return 0, usageErrorf("%s %q: the unit must be /s, /m or /h", flag, v)
}

// parseSize reads a byte size: 4096, 4KiB, 4K, 1MiB, 1M.
func parseSize(flag, v string) (int, error) {
	t := strings.TrimSpace(v)
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"KB", 1000}, {"MB", 1000_000}, {"K", 1 << 10}, {"M", 1 << 20}, {"k", 1 << 10}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n > (64<<20)/mult {
		return 0, usageErrorf("%s %q: want a size from 0 to 64MiB such as 4096, 4KiB or 1MiB", flag, v)
	}
	return n * mult, nil
}

// localServer is `outpost server` started by this process for a run.
type localServer struct {
	name       string // "local server", or "replica <id>"
	url, token string
	dir        string
	errOut     io.Writer
	cmd        *exec.Cmd
	done       chan struct{}
}

// startLocalServers starts n servers of this build on free loopback
// ports, each with a fresh data dir, on database when set (required for n
// > 1: the replicas share it, with one admin token and one secret key),
// and waits until all are ready. The first serves its runtime profiles
// on pprof when set. The first starts alone (it migrates the
// schema and creates the admin token), the others together after it.
func startLocalServers(ctx context.Context, n int, database, pprof string, errOut io.Writer) ([]*localServer, error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := "opt_fleetsim-" + hex.EncodeToString(b)
	env := []string{"OUTPOST_ADMIN_TOKEN=" + token}
	if n > 1 && os.Getenv(envSecretKey.Name) == "" && os.Getenv(envSecretKeyFile.Name) == "" {
		key, err := sealed.GenerateKey()
		if err != nil {
			return nil, err
		}
		env = append(env, envSecretKey.Name+"="+sealed.EncodeKey(key))
	}
	var srvs []*localServer
	fail := func(err error) ([]*localServer, error) {
		stopLocalServers(srvs)
		return nil, err
	}
	for i := range n {
		srv, err := launchLocalServer(i, n, token, env, database, pprof, errOut)
		if err != nil {
			return fail(err)
		}
		srvs = append(srvs, srv)
		if i == 0 {
			if err := srv.waitReady(ctx); err != nil {
				return fail(err)
			}
		}
	}
	for _, srv := range srvs[1:] {
		if err := srv.waitReady(ctx); err != nil {
			return fail(err)
		}
	}
	for _, srv := range srvs {
		fmt.Fprintf(errOut, "fleetsim: %s at %s, data in %s\n", srv.name, srv.url, srv.dir)
	}
	return srvs, nil
}

// stopLocalServers stops the servers, all at once.
func stopLocalServers(srvs []*localServer) {
	var wg sync.WaitGroup
	for _, srv := range srvs {
		wg.Go(srv.stop)
	}
	wg.Wait()
}

// launchLocalServer starts the i-th of n servers on a free loopback port.
// Its log goes to a file in its data dir, shown when it fails. A replica
// (n > 1) gets an id and is its own public URL, so that the gateway URL a
// claim hands out is the one of the replica that answered it, as each
// replica of a deployment without a balancer does.
func launchLocalServer(i, n int, token string, env []string, database, pprof string, errOut io.Writer) (*localServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start its server: %w", err)
	}
	dir, err := os.MkdirTemp("", "outpost-fleetsim")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	srv := &localServer{name: "local server", url: "http://" + addr, token: token, dir: dir, errOut: errOut, done: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"server", "--listen", addr, "--data-dir", filepath.Join(dir, "data"), "--log-level", "warn"}
	if database != "" {
		args = append(args, "--database", database)
	}
	if n > 1 {
		id := fmt.Sprintf("fleetsim-r%d", i+1)
		srv.name = "replica " + id
		args = append(args, "--replica-id", id, "--replica-url", srv.url, "--public-url", srv.url)
	}
	if pprof != "" && i == 0 {
		args = append(args, "--pprof-listen", pprof)
	}
	srv.cmd = exec.Command(exe, args...)
	srv.cmd.Env = append(os.Environ(), env...)
	srv.cmd.Stdout, srv.cmd.Stderr = logf, logf
	srv.cmd.SysProcAttr = localServerAttr()
	if err := srv.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the %s: %w", srv.name, err)
	}
	go func() {
		_ = srv.cmd.Wait()
		logf.Close()
		close(srv.done)
	}()
	return srv, nil
}

// waitReady waits until the server answers /readyz, at most a minute.
func (s *localServer) waitReady(ctx context.Context) error {
	c, err := client.New(s.url, s.token)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for c.Ready(rctx) != nil {
		select {
		case <-s.done:
			return fmt.Errorf("the %s exited before it was ready: %s", s.name, s.logTail())
		case <-rctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the %s was not ready within a minute", s.name)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (s *localServer) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// stop stops the server (interrupt, then kill after 15 s) and removes its
// data dir. A server that had exited by itself has the end of its log
// shown first.
func (s *localServer) stop() {
	select {
	case <-s.done:
		fmt.Fprintf(s.errOut, "fleetsim: the %s exited during the run (%v); the end of its log:\n%s\n", s.name, s.cmd.ProcessState, s.logTail())
	default:
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
}
