package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"

	"github.com/outpost-sh/outpost/internal/netguard"
)

// How the docker backend enforces a restricted session's network policy.
//
// The session's guard (internal/netguard) must own the container's network
// namespace: its TUN device is the namespace's only route out, its engine
// answers DNS there, and its loopback bridge brings the gateway in. Podman
// accepts a namespace path as a network mode (ns:/path), Docker does not;
// both accept container:<id>, a namespace another container holds. So each
// restricted machine is two containers:
//
//   - the holder, OUTPOST-NAME-netns: network "none" (a fresh namespace with
//     lo only), every capability dropped, a read-only root, a shell that
//     only waits, run without an init process whatever the daemon's
//     default. The orchestrator reads its host pid from the Engine API,
//     checks that /proc/PID is that very process (its command line names the
//     holder), opens /proc/PID/ns/net, and the guard sets the namespace up
//     from the host: TUN device, routes, DNS, the gateway's bridge;
//   - the session's container, started only then, with network
//     container:<holder>, the guard's resolv.conf bound read-only over
//     /etc/resolv.conf, and NET_ADMIN and NET_RAW dropped, so code in it can
//     neither change the namespace's routes or devices nor open raw
//     sockets. It keeps the runtime's other default capabilities (Docker's:
//     CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP,
//     SETFCAP, NET_BIND_SERVICE, SYS_CHROOT, MKNOD, AUDIT_WRITE; Podman's
//     are a subset), none of which reaches the network namespace.
//
// The namespace is made by a rootful runtime in the host's user namespace,
// so no process in the containers holds a capability over it. This needs
// the orchestrator on the daemon's machine, as root, seeing the daemon's
// pids: a daemon over tcp://, a rootless one, or one in another pid
// namespace (a VM) cannot be enforced for, and Check says so (the backend
// then never claims a restricted session).

const (
	// LabelRole marks the holder of a machine's network namespace
	// (RoleNetns) among the containers of a session.
	LabelRole = "sh.outpost.role"
	RoleNetns = "netns"
	// holderSuffix names a machine's holder: NAME-netns.
	holderSuffix = "-netns"
	// holderScript keeps the holder alive, doing nothing, until it is
	// stopped; its $0 is the holder's name, which identifies its process.
	holderScript = `trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done`
)

// restrictedCapDrop are the capabilities a restricted session's container
// lacks: with them, code in it could reconfigure the namespace the guard
// serves or send packets the engine never parses.
var restrictedCapDrop = []string{"NET_ADMIN", "NET_RAW"}

// holderName is the name of the container holding machine name's network
// namespace.
func holderName(name string) string { return name + holderSuffix }

// holder is the network namespace of a restricted machine.
type holder struct {
	id string
	ns *os.File // /proc/PID/ns/net of the holder, held open
}

// EnforcesNetwork is nil when the backend can run a restricted session's
// container behind its guard here; else why not, in a sentence. Until
// Check has run it is an error.
func (b *DockerBackend) EnforcesNetwork() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.netErr
}

// checkNetwork finds out whether restricted sessions can run here: Linux,
// root, network namespaces and TUN devices, a local and rootful daemon
// whose container pids this process sees (tried with a probe holder).
func (b *DockerBackend) checkNetwork(ctx context.Context) error {
	if runtime.GOOS != "linux" {
		return errors.New("the docker backend enforces network policies on Linux only")
	}
	if os.Geteuid() != 0 {
		return errors.New("the docker backend enforces network policies only when the orchestrator runs as root, which it needs to enter its containers' network namespaces")
	}
	if u, err := url.Parse(b.Host()); err != nil || u.Scheme != "unix" {
		return fmt.Errorf("the Engine API at %s is not a local socket, so its containers' network namespaces may be on another machine, out of the orchestrator's reach", b.Host())
	}
	info, err := b.cli.Info(ctx)
	if err != nil {
		return fmt.Errorf("the Engine API at %s did not describe itself (%v)", b.Host(), err)
	}
	if slices.ContainsFunc(info.SecurityOptions, func(o string) bool { return strings.Contains(o, "rootless") }) {
		return fmt.Errorf("the daemon at %s is rootless: its containers' network namespaces belong to a user namespace whose root the session's code holds", b.Host())
	}
	if err := netguard.Check(ctx); err != nil {
		return fmt.Errorf("the orchestrator cannot make a network namespace's TUN device here (%w)", err)
	}
	b.removeStaleProbes(ctx)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	probe := Spec{Name: probePrefix + hex.EncodeToString(suffix)}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = b.removeHolder(rctx, probe.Name)
	}()
	if _, err := b.NetworkNamespace(ctx, probe); err != nil {
		return fmt.Errorf("the orchestrator cannot enter the network namespace of the daemon's containers (%v)", err)
	}
	return nil
}

// probePrefix names the holders checkNetwork starts to try the daemon.
const probePrefix = "outpost-netprobe-"

// staleProbeAge is how old a probe's holder must be to be the leftover of
// an orchestrator that ended during its check (a probe lasts seconds), and
// not another's probe under way.
const staleProbeAge = 10 * time.Minute

// removeStaleProbes removes the probe holders that an earlier run of an
// orchestrator of this outpost left when it ended during its check: they
// belong to no session, so no teardown ever reaches them, and they would
// wait forever.
func (b *DockerBackend) removeStaleProbes(ctx context.Context) {
	f := filters.NewArgs(filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", LabelRole+"="+RoleNetns))
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return // the probe that follows says what is wrong with the daemon
	}
	for _, c := range list {
		probe := slices.ContainsFunc(c.Names, func(n string) bool { return strings.HasPrefix(strings.TrimPrefix(n, "/"), probePrefix) })
		if !probe || c.Labels[LabelSession] != "" || c.Labels[LabelOutpost] != b.opts.Outpost || time.Since(time.Unix(c.Created, 0)) < b.staleProbeAge {
			continue
		}
		_ = b.forceRemove(ctx, c.ID)
	}
}

// NetworkNamespace starts the holder of s's machine's network namespace
// and returns a path to the namespace, valid until Teardown.
func (b *DockerBackend) NetworkNamespace(ctx context.Context, s Spec) (string, error) {
	if err := b.ensureImage(ctx); err != nil {
		return "", err
	}
	name := holderName(s.Name)
	labels := b.labels(s)
	labels[LabelRole] = RoleNetns
	cfg := &container.Config{
		Image:      b.opts.Image,
		Entrypoint: []string{"/bin/sh", "-c", holderScript, name},
		Labels:     labels,
	}
	noInit := false
	hc := &container.HostConfig{
		NetworkMode:    "none",
		CapDrop:        []string{"ALL"},
		ReadonlyRootfs: true,
		SecurityOpt:    []string{"no-new-privileges"},
		Resources:      container.Resources{Ulimits: b.opts.Ulimits},
		// No init process, whatever the daemon's default ("init": true):
		// under one, the pid the daemon reports is the init's, not the
		// holder's shell, and startHolder rightly refuses it.
		Init: &noInit,
	}
	created, err := b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if cerrdefs.IsConflict(err) {
		// Left from an earlier run whose guard is gone: a fresh one.
		if rerr := b.removeManaged(context.WithoutCancel(ctx), name); rerr != nil {
			return "", fmt.Errorf("create container %s: %w (and the existing one cannot be removed: %v)", name, err, rerr)
		}
		created, err = b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	}
	if err != nil {
		return "", fmt.Errorf("create container %s from %s: %w", name, b.opts.Image, err)
	}
	h, err := b.startHolder(ctx, name, created.ID)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := b.forceRemove(rctx, created.ID); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return "", err
	}
	b.mu.Lock()
	if old := b.holders[s.Name]; old != nil {
		old.ns.Close()
	}
	b.holders[s.Name] = h
	b.mu.Unlock()
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), h.ns.Fd()), nil
}

// startHolder starts the holder container id and opens its network
// namespace, making sure the pid the API reports is the holder's process
// as this machine sees it.
func (b *DockerBackend) startHolder(ctx context.Context, name, id string) (*holder, error) {
	if err := b.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return nil, fmt.Errorf("start container %s: %w", name, err)
	}
	info, err := b.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("inspect container %s: %w", name, err)
	}
	if info.State == nil || !info.State.Running || info.State.Pid <= 0 {
		return nil, fmt.Errorf("container %s is not running", name)
	}
	pid := info.State.Pid
	if !waitHolderProcess(ctx, pid, name) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return nil, fmt.Errorf("the daemon reports pid %d for container %s, which runs %q here, not the container's command (is the daemon in another pid namespace or on another machine?)",
			pid, name, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("open the network namespace of container %s: %w", name, err)
	}
	// Checked again with the namespace open: the pid cannot have been
	// reused by another process in between.
	if !isHolderProcess(pid, name) {
		f.Close()
		return nil, fmt.Errorf("container %s's process %d went away", name, pid)
	}
	return &holder{id: info.ID, ns: f}, nil
}

// waitHolderProcess waits until pid runs the holder's command: the
// runtime may report a started container while its process still runs the
// runtime's own init, a moment before it executes the command.
func waitHolderProcess(ctx context.Context, pid int, name string) bool {
	deadline := time.Now().Add(holderExecTimeout)
	for !isHolderProcess(pid, name) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// holderExecTimeout bounds the wait for a holder's process to execute its
// command.
const holderExecTimeout = 10 * time.Second

// isHolderProcess reports whether pid runs holderScript for the holder
// named name.
func isHolderProcess(pid int, name string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	return len(args) == 4 && args[1] == "-c" && args[2] == holderScript && args[3] == name
}

// restrict makes a restricted session's container join its holder's
// namespace, see the guard's resolv.conf and lack the capabilities that
// would undo the guard.
func (b *DockerBackend) restrict(s Spec, hc *container.HostConfig) error {
	b.mu.Lock()
	h := b.holders[s.Name]
	b.mu.Unlock()
	if h == nil {
		return fmt.Errorf("machine %s has a network policy but no network namespace was made for it", s.Name)
	}
	if s.ResolvConf == "" {
		return fmt.Errorf("machine %s has a network policy but no resolv.conf", s.Name)
	}
	hc.NetworkMode = container.NetworkMode("container:" + h.id)
	hc.CapDrop = append(hc.CapDrop, restrictedCapDrop...)
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: s.ResolvConf, Target: "/etc/resolv.conf", ReadOnly: true})
	return nil
}

// removeHolder removes the holder of machine name, if any, and closes its
// namespace.
func (b *DockerBackend) removeHolder(ctx context.Context, name string) error {
	err := b.removeManaged(ctx, holderName(name))
	if err == nil || errors.Is(err, errNotManaged) {
		b.mu.Lock()
		if h := b.holders[name]; h != nil {
			h.ns.Close()
			delete(b.holders, name)
		}
		b.mu.Unlock()
	}
	return err
}

// joinedNamespace reports whether a container runs in another's network
// namespace: a restricted session's, whose guard ended with the
// orchestrator that started it.
func joinedNamespace(info container.InspectResponse) bool {
	return info.HostConfig != nil && info.HostConfig.NetworkMode.IsContainer()
}
