//go:build unix

// Package pgtest starts throwaway PostgreSQL servers for tests: the store's
// own tests, the end-to-end tests and the benchmarks. It runs Debian's
// postgresql binaries (/usr/lib/postgresql/<version>/bin); a server lives in
// a temporary directory, listens on 127.0.0.1 on a free port (its Unix
// socket in the same directory), trusts local connections and is removed
// when stopped. As root it runs the server as the postgres system user (or
// nobody), since PostgreSQL refuses to run as root.
//
// When PostgreSQL is not installed, Require and Shared skip the test, unless
// the CI environment variable is set, when they fail it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configure a server.
type Options struct {
	// Fsync keeps PostgreSQL's fsync on: commits are on disk before they
	// are acknowledged (honest numbers, crash tests). Off, the server
	// skips fsync and full-page writes, which is faster and fine for tests
	// whose data dies with them.
	Fsync bool
	// MaxConnections is the server's max_connections; 0 means 300.
	MaxConnections int
	// Settings are more server settings, each "name=value" (passed as
	// -c): shared_preload_libraries=pg_stat_statements to count a
	// benchmark's statements, for one.
	Settings []string
}

// User is the superuser every server trusts.
const User = "outpost"

// Server is a running PostgreSQL server.
type Server struct {
	// Dir holds the cluster (Dir/data), the socket and the log (Dir/postgres.log).
	Dir  string
	Port int

	bin  string
	cred *syscall.Credential
	opts Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
	ndb  int
}

// BinDir returns the bin directory of the newest installed PostgreSQL, or
// "" when none is.
func BinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var ok []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			ok = append(ok, d)
		}
	}
	if len(ok) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p)
		}
		return ""
	}
	version := func(d string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return v
	}
	slices.SortFunc(ok, func(a, b string) int { return version(a) - version(b) })
	return ok[len(ok)-1]
}

// Require skips tb when PostgreSQL is not installed, or fails it when the
// CI environment variable is set, and returns the bin directory.
func Require(tb testing.TB) string {
	tb.Helper()
	bin := BinDir()
	if bin == "" {
		if os.Getenv("CI") != "" {
			tb.Fatal("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb) and CI is set: install the postgresql package (scripts/test-deps.sh)")
		}
		tb.Skip("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): apt-get install postgresql to run this test")
	}
	return bin
}

// Start initialises a cluster in a new temporary directory and starts a
// server on it.
func Start(opts Options) (*Server, error) {
	bin := BinDir()
	if bin == "" {
		return nil, errors.New("pgtest: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 300
	}
	dir, err := os.MkdirTemp(tempBase(), "outpost-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin, opts: opts}
	if err := s.init(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// The free port may be taken before the server binds it: try another.
	for attempt := 1; ; attempt++ {
		if s.Port, err = freePort(); err == nil {
			if err = s.start(); err == nil {
				return s, nil
			}
		}
		if attempt == 3 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// tempBase is where servers' directories go: the temporary directory, or
// /tmp when running as root and the temporary directory is closed to the
// unprivileged user the server runs as.
func tempBase() string {
	base := os.TempDir()
	if os.Geteuid() != 0 {
		return base
	}
	for d := base; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if d == filepath.Dir(d) {
			return base
		}
	}
}

// StartT starts a server for one test and stops it when the test ends. It
// skips or fails tb as Require does when PostgreSQL is not installed.
func StartT(tb testing.TB, opts Options) *Server {
	tb.Helper()
	Require(tb)
	s, err := Start(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("pgtest: stop: %v", err)
		}
	})
	return s
}

// init runs initdb as the server's user.
func (s *Server) init() error {
	if os.Geteuid() == 0 {
		cred, err := unprivileged()
		if err != nil {
			return err
		}
		s.cred = cred
		if err := os.Chown(s.Dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: chown %s: %w", s.Dir, err)
		}
	}
	cmd := exec.Command(filepath.Join(s.bin, "initdb"), "-D", filepath.Join(s.Dir, "data"), "-U", User,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	return nil
}

// unprivileged is the user a root process runs PostgreSQL as.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
		}
	}
	return nil, errors.New("pgtest: running as root and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start runs the server on the existing cluster and waits until it accepts
// connections.
func (s *Server) start() error {
	logf, err := os.OpenFile(filepath.Join(s.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"-D", filepath.Join(s.Dir, "data"), "-k", s.Dir, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port),
		"-c", "max_connections=" + strconv.Itoa(s.opts.MaxConnections)}
	if !s.opts.Fsync {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	for _, set := range s.opts.Settings {
		args = append(args, "-c", set)
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// SIGQUIT (immediate shutdown) if the test process dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	setDeathSignal(cmd.SysProcAttr, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			c.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-done:
			return fmt.Errorf("pgtest: postgres exited at start:\n%s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			s.signal(syscall.SIGQUIT)
			<-done
			return fmt.Errorf("pgtest: postgres did not accept connections within a minute: %v\n%s", err, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log returns the end of the server's log.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// URL is the connection URL of database db.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, s.Port, db)
}

// ViaSocket is u, a URL of one of the server's databases, through the
// server's Unix socket instead of TCP: a client on the same machine skips
// the TCP stack.
func (s *Server) ViaSocket(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	q := p.Query()
	q.Set("host", s.Dir)
	q.Set("port", strconv.Itoa(s.Port))
	p.Host, p.RawQuery = "", q.Encode()
	return p.String(), nil
}

// CreateDatabase creates a new, empty database and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	s.mu.Lock()
	s.ndb++
	name := fmt.Sprintf("test_%d", s.ndb)
	defer s.mu.Unlock() // one CREATE DATABASE at a time: they copy template1
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return s.URL(name), nil
}

// Database creates a new, empty database for tb and returns its URL.
func (s *Server) Database(tb testing.TB) string {
	tb.Helper()
	url, err := s.CreateDatabase(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return url
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// PID is the postmaster's process id (0 when it is not running): its
// children are the server's backends, for benchmarks that count the
// database's CPU.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// halt sends sig and waits up to a minute for the server to exit.
func (s *Server) halt(sig syscall.Signal) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil // already gone
	default:
	}
	s.signal(sig)
	select {
	case <-done:
	case <-time.After(time.Minute):
		s.signal(syscall.SIGKILL)
		<-done
		return fmt.Errorf("pgtest: postgres did not stop within a minute on %v", sig)
	}
	s.mu.Lock()
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	return nil
}

// Crash stops the server the way a crash would: an immediate shutdown
// (SIGQUIT), no checkpoint, so the next start replays the WAL. Restart
// brings it back on the same data and port.
func (s *Server) Crash() error { return s.halt(syscall.SIGQUIT) }

// Restart starts a stopped or crashed server again on the same data and port.
func (s *Server) Restart() error { return s.start() }

// Stop shuts the server down (fast shutdown, SIGINT) and removes its
// directory.
func (s *Server) Stop() error {
	err := s.halt(syscall.SIGINT)
	if rerr := os.RemoveAll(s.Dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the package's shared server (fsync off), starting it on
// first use; Main stops it. It skips or fails tb as Require does when
// PostgreSQL is not installed.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	Require(tb)
	shared.once.Do(func() { shared.srv, shared.err = Start(Options{}) })
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.srv
}

// Main runs the tests of a package that uses Shared, then stops the shared
// server: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}
