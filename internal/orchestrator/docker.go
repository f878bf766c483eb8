package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	units "github.com/docker/go-units"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// Labels of the containers the docker backend makes.
const (
	LabelManaged = "sh.outpost.managed"
	LabelSession = "sh.outpost.session"
	LabelOutpost = "sh.outpost.outpost"
	// LabelAcceptor is the acceptor id of the orchestrator that made the
	// container, so that after a crash it finds its own containers even
	// when their workspaces are gone, and never another's.
	LabelAcceptor = "sh.outpost.acceptor"
)

// Paths inside a docker backend container.
const (
	DockerBinary   = "/usr/local/bin/outpost"
	DockerStateDir = "/outpost/state"
	DockerWorkDir  = "/workspace"
	// DockerCAFile is OUTPOST_CA_FILE in the container, a read-only bind
	// of the host file, when the spec has one.
	DockerCAFile = "/outpost/ca.pem"
	// DefaultDockerNetwork lets the remote reach a gateway on the host's
	// loopback interface.
	DefaultDockerNetwork = "host"
	// MinDockerAPIVersion is the oldest Engine API the backend works with:
	// Podman 4.3's Docker-compatible service reports 1.41.
	MinDockerAPIVersion = "1.41"
)

// Ulimit is a container's resource limit (name, soft, hard).
type Ulimit = container.Ulimit

// DockerOptions configure a DockerBackend.
type DockerOptions struct {
	// Image runs the remote; it needs a libc the outpost binary runs on
	// and git. Required.
	Image string
	// Host is the Engine API address (unix:///run/podman/podman.sock,
	// tcp://…); empty means DOCKER_HOST, then the standard socket.
	Host string
	// Outpost labels the containers (sh.outpost.outpost).
	Outpost string
	// CPUs limits each container (0: no limit); Memory too, in bytes.
	CPUs   float64
	Memory int64
	// Network is the container's network mode; empty means "host".
	Network string
	// Ulimits override the defaults, which are this process's own nofile
	// and nproc limits (a runtime's defaults may exceed what the host
	// allows).
	Ulimits []*Ulimit
	// StopGrace is how long Teardown waits after SIGTERM before SIGKILL;
	// zero means 5s.
	StopGrace time.Duration
}

// DockerBackend gives each session a fresh container through the Docker
// Engine API (Docker, or Podman's Docker-compatible service). The outpost
// binary the orchestrator runs is bind-mounted read-only into the container
// and runs as its main process; the container is named Spec.Name and
// labelled, so a restarted orchestrator finds it.
type DockerBackend struct {
	opts DockerOptions
	cli  *client.Client

	imageMu sync.Mutex // held during a pull
	imageOK bool

	mu       sync.Mutex // guards the following
	machines map[string]*dockerMachine
	holders  map[string]*holder // by machine name: restricted machines' namespaces
	netErr   error              // why restricted sessions cannot run here; nil when they can

	// staleProbeAge is staleProbeAge but in tests.
	staleProbeAge time.Duration
}

// NewDockerBackend makes a backend; it does not contact the API (see Check).
func NewDockerBackend(opts DockerOptions) (*DockerBackend, error) {
	if opts.Image == "" {
		return nil, errors.New("docker backend: an image is required")
	}
	if opts.Network == "" {
		opts.Network = DefaultDockerNetwork
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = killDelay
	}
	opts.Ulimits = withDefaultUlimits(opts.Ulimits)
	copts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if opts.Host != "" {
		copts = append(copts, client.WithHost(opts.Host))
	}
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker backend: create the Engine API client: %w", err)
	}
	return &DockerBackend{opts: opts, cli: cli, machines: map[string]*dockerMachine{}, holders: map[string]*holder{},
		netErr:        errors.New("the docker backend has not checked yet whether it can enforce a network policy here"),
		staleProbeAge: staleProbeAge}, nil
}

func (*DockerBackend) Name() string { return "docker" }

// Host is the Engine API address the backend talks to.
func (b *DockerBackend) Host() string { return b.cli.DaemonHost() }

// Close closes the API client's idle connections.
func (b *DockerBackend) Close() error { return b.cli.Close() }

// Check reaches the API (negotiating its version) and makes sure the image
// is present, pulling it if needed; it returns the API version in use. It
// also finds out whether restricted sessions can run here (see
// EnforcesNetwork), which is no error: the backend then serves open
// sessions only.
func (b *DockerBackend) Check(ctx context.Context) (string, error) {
	ping, err := b.cli.Ping(ctx)
	if err != nil {
		return "", fmt.Errorf("docker backend: reach the Engine API at %s: %w", b.Host(), err)
	}
	b.cli.NegotiateAPIVersionPing(ping)
	v := b.cli.ClientVersion()
	if versionLess(v, MinDockerAPIVersion) {
		return v, fmt.Errorf("docker backend: the Engine API at %s speaks %s, older than the %s this backend needs", b.Host(), v, MinDockerAPIVersion)
	}
	if err := b.ensureImage(ctx); err != nil {
		return v, err
	}
	netErr := b.checkNetwork(ctx)
	b.mu.Lock()
	b.netErr = netErr
	b.mu.Unlock()
	return v, nil
}

// ensureImage pulls the image when it is missing, once per backend.
func (b *DockerBackend) ensureImage(ctx context.Context) error {
	b.imageMu.Lock()
	defer b.imageMu.Unlock()
	if b.imageOK {
		return nil
	}
	_, err := b.cli.ImageInspect(ctx, b.opts.Image)
	if err == nil {
		b.imageOK = true
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", b.opts.Image, err)
	}
	rc, err := b.cli.ImagePull(ctx, b.opts.Image, image.PullOptions{})
	if err == nil {
		err = pullError(rc)
		rc.Close()
	}
	if err != nil {
		return fmt.Errorf("image %s is not present and cannot be pulled: %w", b.opts.Image, err)
	}
	b.imageOK = true
	return nil
}

// pullError reads a pull's JSON progress stream to its end and returns the
// error it reports, if any.
func pullError(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the pull's progress: %w", err)
		}
		switch {
		case msg.ErrorDetail != nil && msg.ErrorDetail.Message != "":
			return errors.New(msg.ErrorDetail.Message)
		case msg.Error != "":
			return errors.New(msg.Error)
		}
	}
}

// containerEnv is the remote's environment in the container: the spawn
// contract's variables only (never the host's PATH, HOME, … nor the
// orchestrator's token), with the state dir and the CA file inside the
// container.
func containerEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case api.EnvGatewayURL.Name, api.EnvConnectToken.Name, api.EnvSessionID.Name:
			out = append(out, kv)
		case tlsconfig.EnvCAFile:
			if v != "" {
				out = append(out, tlsconfig.EnvCAFile+"="+DockerCAFile)
			}
		}
	}
	return append(out, api.EnvStateDir.Name+"="+DockerStateDir)
}

// containerMounts are the container's bind mounts: the outpost binary and,
// when the spec has one, the CA file, both read-only.
func containerMounts(bin string, env []string) ([]mount.Mount, error) {
	mounts := []mount.Mount{{Type: mount.TypeBind, Source: bin, Target: DockerBinary, ReadOnly: true}}
	if ca := envValue(env, tlsconfig.EnvCAFile); ca != "" {
		src, err := filepath.EvalSymlinks(ca)
		if err != nil {
			return nil, fmt.Errorf("the CA file for the container (%s): %w", tlsconfig.EnvCAFile, err)
		}
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: DockerCAFile, ReadOnly: true})
	}
	return mounts, nil
}

// containerCmd is the arguments of DockerBinary that run remote: a
// downloaded build (devin-remote serve) is mounted as outpost too, under
// which name it is the whole command, so its arguments get "remote" first.
func containerCmd(remote []string) []string {
	args := append([]string{}, remote[1:]...)
	if dist.IsRemoteName(remote[0]) {
		args = append([]string{"remote"}, args...)
	}
	return args
}

// hostBinary is the host path of the outpost binary to mount.
func hostBinary(remote []string) (string, error) {
	if len(remote) == 0 {
		return "", errors.New("no remote command")
	}
	p, err := exec.LookPath(remote[0])
	if err != nil {
		return "", fmt.Errorf("find the outpost binary: %w", err)
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(p)
}

func (b *DockerBackend) labels(s Spec) map[string]string {
	l := map[string]string{LabelManaged: "true", LabelSession: s.SessionID}
	if b.opts.Outpost != "" {
		l[LabelOutpost] = b.opts.Outpost
	}
	if s.Acceptor != "" {
		l[LabelAcceptor] = s.Acceptor
	}
	return l
}

// Leftovers returns the sessions of the containers, running or not, that
// acceptor made.
func (b *DockerBackend) Leftovers(ctx context.Context, acceptor string) ([]string, error) {
	f := filters.NewArgs(filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelAcceptor+"="+acceptor))
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers of %s: %w", acceptor, err)
	}
	var ids []string
	for _, c := range list {
		if id := c.Labels[LabelSession]; id != "" && c.Labels[LabelAcceptor] == acceptor {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (b *DockerBackend) Provision(ctx context.Context, s Spec) (Machine, error) {
	bin, err := hostBinary(s.Remote)
	if err != nil {
		return nil, err
	}
	// The workspace is how a restarted orchestrator finds the container.
	if err := os.MkdirAll(s.Workspace, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	if err := b.ensureImage(ctx); err != nil {
		return nil, err
	}
	cfg := &container.Config{
		Image:      b.opts.Image,
		Entrypoint: []string{DockerBinary},
		Cmd:        containerCmd(s.Remote),
		Env:        containerEnv(s.Env),
		WorkingDir: DockerWorkDir,
		Labels:     b.labels(s),
	}
	mounts, err := containerMounts(bin, s.Env)
	if err != nil {
		return nil, err
	}
	hc := &container.HostConfig{
		Mounts:      mounts,
		NetworkMode: container.NetworkMode(b.opts.Network),
		AutoRemove:  false, // the exit code is read, then Teardown removes it
		Resources: container.Resources{
			NanoCPUs: int64(b.opts.CPUs * 1e9),
			Memory:   b.opts.Memory,
			Ulimits:  b.opts.Ulimits,
		},
	}
	if s.Network != nil {
		if err := b.restrict(s, hc); err != nil {
			return nil, err
		}
	}
	created, err := b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, s.Name)
	if cerrdefs.IsConflict(err) {
		// A container of that name is left from an earlier run whose
		// workspace is gone; the session is claimed by us now.
		if rerr := b.removeManaged(context.WithoutCancel(ctx), s.Name); rerr != nil {
			return nil, fmt.Errorf("create container %s: %w (and the existing one cannot be removed: %v)", s.Name, err, rerr)
		}
		created, err = b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, s.Name)
	}
	if cerrdefs.IsNotFound(err) { // the image went away since it was checked
		b.imageMu.Lock()
		b.imageOK = false
		b.imageMu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("create container %s from %s: %w", s.Name, b.opts.Image, err)
	}
	if err := b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := b.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			err = errors.Join(err, fmt.Errorf("remove the container: %w", rerr))
		}
		return nil, fmt.Errorf("start container %s: %w", s.Name, err)
	}
	_ = atomicfile.Write(filepath.Join(s.Workspace, "container"), []byte(created.ID+"\n"), 0o600)
	return b.watch(s.Name, created.ID), nil
}

// Adopt returns the container of a leftover workspace if it still runs and
// is the session's.
func (b *DockerBackend) Adopt(ctx context.Context, s Spec) (Machine, bool) {
	info, err := b.cli.ContainerInspect(ctx, s.Name)
	if err != nil || info.Config == nil || info.State == nil {
		return nil, false
	}
	if info.Config.Labels[LabelManaged] != "true" || info.Config.Labels[LabelSession] != s.SessionID || !info.State.Running {
		return nil, false
	}
	if joinedNamespace(info) {
		// Its namespace's guard ended with the orchestrator that started
		// it: it has no way out, and no policy would hold if it had one.
		return nil, false
	}
	return b.watch(s.Name, info.ID), true
}

// Teardown stops the container (SIGTERM, SIGKILL after StopGrace), removes
// it, the holder of its network namespace if it has one, and the
// workspace. A missing container is not an error; a container
// of that name the backend did not make is left alone.
//
// When the API fails, the workspace is kept so that a restarted
// orchestrator tries again rather than leak the container.
func (b *DockerBackend) Teardown(ctx context.Context, s Spec) error {
	// The session's container first: the holder's namespace is its.
	err := b.removeManaged(ctx, s.Name)
	herr := b.removeHolder(ctx, s.Name)
	for _, e := range []error{err, herr} {
		if e != nil && !errors.Is(e, errNotManaged) {
			return fmt.Errorf("%w (workspace %s kept for a later teardown)", errors.Join(err, herr), s.Workspace)
		}
	}
	if err == nil {
		b.mu.Lock()
		m := b.machines[s.Name]
		delete(b.machines, s.Name)
		b.mu.Unlock()
		if m != nil {
			m.finish("container removed")
		}
	}
	return errors.Join(err, herr, os.RemoveAll(s.Workspace))
}

// errNotManaged marks a container of a machine's name that the backend did
// not make.
var errNotManaged = errors.New("not one outpost made")

// removeManaged stops and removes the container name if it carries the
// managed label.
func (b *DockerBackend) removeManaged(ctx context.Context, name string) error {
	info, err := b.cli.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect container %s: %w", name, err)
	}
	if info.Config == nil || info.Config.Labels[LabelManaged] != "true" {
		return fmt.Errorf("container %s is %w (no %s label); leaving it", name, errNotManaged, LabelManaged)
	}
	if info.State != nil && info.State.Running {
		secs := int((b.opts.StopGrace + time.Second - 1) / time.Second)
		if err := b.cli.ContainerStop(ctx, info.ID, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
			// Force removal below kills it anyway.
			err = fmt.Errorf("stop container %s: %w", name, err)
			if rerr := b.forceRemove(ctx, info.ID); rerr != nil {
				return errors.Join(err, rerr)
			}
			return nil
		}
	}
	return b.forceRemove(ctx, info.ID)
}

func (b *DockerBackend) forceRemove(ctx context.Context, id string) error {
	err := b.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	return nil
}

// dockerMachine is a container running a remote.
type dockerMachine struct {
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	exit   string
	code   int // the container's exit code; -1 when unknown
	cancel context.CancelFunc
}

func (m *dockerMachine) Done() <-chan struct{} { return m.done }
func (m *dockerMachine) Exit() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exit
}

// ExitCode reports the container's exit code, the remote's (it is the
// container's main process), once the runtime has reported it: so that the
// transcript's exit step carries it (0 after a suspend or an end) and the
// orchestrator leaves a claim its remote was refused on (4) alone.
func (m *dockerMachine) ExitCode() (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.code, m.code >= 0
}

func (m *dockerMachine) finish(exit string) { m.finishCode(exit, -1) }

// finishCode closes Done, once, with the exit and its code (-1: unknown).
func (m *dockerMachine) finishCode(exit string, code int) {
	m.once.Do(func() {
		m.mu.Lock()
		m.exit, m.code = exit, code
		m.mu.Unlock()
		m.cancel()
		close(m.done)
	})
}

// watch returns the machine of container id, whose Done closes when the
// container stops running.
func (b *DockerBackend) watch(name, id string) *dockerMachine {
	ctx, cancel := context.WithCancel(context.Background())
	m := &dockerMachine{done: make(chan struct{}), code: -1, cancel: cancel}
	b.mu.Lock()
	if old := b.machines[name]; old != nil {
		old.finish("replaced")
	}
	b.machines[name] = m
	b.mu.Unlock()
	go b.waitExit(ctx, m, id)
	return m
}

// dockerWaitBackoff paces the container waits retried after the API failed.
var dockerWaitBackoff = backoff.Policy{Base: 500 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}

func (b *DockerBackend) waitExit(ctx context.Context, m *dockerMachine, id string) {
	for n := 1; ctx.Err() == nil; n++ {
		res, errc := b.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
		select {
		case r := <-res:
			if r.Error != nil && r.Error.Message != "" {
				m.finish(fmt.Sprintf("exit status %d (%s)", r.StatusCode, r.Error.Message))
				return
			}
			m.finishCode(b.exitString(id, r.StatusCode), int(r.StatusCode))
			return
		case <-errc:
			if ctx.Err() != nil {
				return
			}
			// The wait failed (API restarted, connection lost, container
			// removed): ask for the state directly.
			info, ierr := b.cli.ContainerInspect(ctx, id)
			switch {
			case cerrdefs.IsNotFound(ierr):
				m.finish("container removed")
				return
			case ierr == nil && info.State != nil && !info.State.Running:
				m.finishCode(b.exitString(id, int64(info.State.ExitCode)), info.State.ExitCode)
				return
			}
		}
		_ = dockerWaitBackoff.Wait(ctx, nil, n)
	}
}

// exitString describes an exit, with the tail of the container's output
// when it failed.
func (b *DockerBackend) exitString(id string, code int64) string {
	s := fmt.Sprintf("exit status %d", code)
	if code == 0 {
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := b.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "5"})
	if err != nil {
		return s
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 64<<10)); err != nil && out.Len() == 0 {
		return s
	}
	if tail := strings.TrimSpace(out.String()); tail != "" {
		if len(tail) > 500 {
			tail = tail[len(tail)-500:]
		}
		s += ": " + tail
	}
	return s
}

// ParseUlimit parses name=soft[:hard], e.g. nofile=1024:1024.
func ParseUlimit(s string) (*container.Ulimit, error) {
	u, err := units.ParseUlimit(s)
	if err != nil {
		return nil, fmt.Errorf("ulimit %q: %w", s, err)
	}
	return u, nil
}

// ParseMemory parses a memory size such as 512m or 2g.
func ParseMemory(s string) (int64, error) {
	n, err := units.RAMInBytes(s)
	if err != nil {
		return 0, fmt.Errorf("memory %q: %w", s, err)
	}
	if n < 0 {
		return 0, fmt.Errorf("memory %q: negative", s)
	}
	return n, nil
}

// versionLess compares dotted API versions such as 1.41 and 1.9.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			fmt.Sscan(pa[i], &x)
		}
		if i < len(pb) {
			fmt.Sscan(pb[i], &y)
		}
		if x != y {
			return x < y
		}
	}
	return false
}
