//go:build linux

package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-sh/outpost/internal/sockguard"
)

// The namespace's addresses. The TUN device holds .2; the engine answers
// DNS on .1 (and on any other address, port 53). They are private to the
// namespace, so every session namespace uses the same ones.
var (
	tunAddr4 = netip.MustParsePrefix("10.254.0.2/24")
	dnsAddr4 = netip.MustParseAddr("10.254.0.1")
	tunAddr6 = netip.MustParsePrefix("fd65:6772:6573::2/64")
	dnsAddr6 = netip.MustParseAddr("fd65:6772:6573::1")
)

// tunOpened is called as soon as a TUN descriptor exists; tests start a
// process there, as another goroutine of the worker might at that moment.
var tunOpened = func(fd int) {}

const (
	tunName = sockguard.Interface
	// tunMTU is large so that bulk transfers cross the TUN device in few
	// packets; the namespace's traffic never meets a real link.
	tunMTU = 65000
)

// Namespace is a network namespace with lo up and a TUN device as its only
// route out (IPv4 and IPv6 default routes). Traffic leaves it only through an
// [Engine] serving it.
type Namespace struct {
	nsFD  int // the namespace, held open for Path and Start
	tunFD int // the TUN device's queue, read by the engine
	// vnetHdr is whether tunFD carries a virtio-net header before each
	// packet (with checksum offload); false where the kernel refused it.
	vnetHdr bool

	mu        sync.Mutex // guards the following
	closed    bool
	served    bool // an engine reads tunFD: it closes it when it stops
	tunClosed bool
}

// NewNamespace creates a namespace and its TUN device. It needs root (or
// CAP_NET_ADMIN and CAP_SYS_ADMIN) and the ip command of iproute2, and says so
// when either is missing.
func NewNamespace(ctx context.Context) (*Namespace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ipPath, err := lookIP()
	if err != nil {
		return nil, err
	}
	type result struct {
		n   *Namespace
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread enters the new namespace and goes back to its own
		// before it serves other goroutines (see onThreadIn).
		var n *Namespace
		err := onThreadIn(-1, func() error {
			var err error
			n, err = newNamespaceLocked(ctx, ipPath)
			return err
		})
		done <- result{n, err}
	}()
	r := <-done
	return r.n, r.err
}

// JoinNamespace serves an existing network namespace, the one at path (a
// container's, /proc/PID/ns/net), instead of a new one: it creates the TUN
// device there and routes everything through it, as NewNamespace does. The
// namespace must have no interface but lo, so that the TUN device is its
// only way out; one with any other is refused and left unchanged. IPv6 is
// configured where the namespace has it; where a runtime turned it off
// there, it stays off (nothing else could carry it out either).
//
// Closing n releases the TUN device; the namespace itself lives as long as
// the processes in it.
func JoinNamespace(ctx context.Context, path string) (*Namespace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ipPath, err := lookIP()
	if err != nil {
		return nil, err
	}
	nsFD, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", path, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(nsFD, &st); err != nil || st.Type != unix.NSFS_MAGIC {
		unix.Close(nsFD)
		return nil, fmt.Errorf("open network namespace %s: not a namespace", path)
	}
	type result struct {
		n   *Namespace
		err error
	}
	done := make(chan result, 1)
	go func() {
		// As in NewNamespace, the thread goes back to its own namespace
		// before it serves other goroutines (see onThreadIn).
		runtime.LockOSThread()
		n, err := joinNamespaceLocked(ctx, ipPath, nsFD)
		done <- result{n, err}
	}()
	r := <-done
	if r.err != nil {
		unix.Close(nsFD)
	}
	return r.n, r.err
}

func joinNamespaceLocked(ctx context.Context, ipPath string, nsFD int) (*Namespace, error) {
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open the current network namespace: %w", err)
	}
	defer unix.Close(home)
	defer func() {
		// Back home and unlocked; a thread that cannot go back ends with
		// its goroutine.
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	var a, b unix.Stat_t
	if unix.Fstat(home, &a) != nil || unix.Fstat(nsFD, &b) != nil || (a.Dev == b.Dev && a.Ino == b.Ino) {
		// Never the caller's own namespace: the TUN device's routes would
		// take the whole machine's traffic.
		return nil, errors.New("join network namespace: it is this process's own")
	}
	if err := unix.Setns(nsFD, unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter network namespace: %w", err)
	}
	links, err := os.ReadFile("/proc/thread-self/net/dev")
	if err != nil {
		return nil, fmt.Errorf("list the namespace's interfaces: %w", err)
	}
	if other := otherInterfaces(links); len(other) > 0 {
		return nil, fmt.Errorf("join network namespace: it has interfaces other than lo (%s), which would be ways out the policy does not see", strings.Join(other, ", "))
	}
	tunFD, vnetHdr, err := openSessionTUN()
	if err != nil {
		return nil, err
	}
	n := &Namespace{nsFD: nsFD, tunFD: tunFD, vnetHdr: vnetHdr}
	fail := func(err error) (*Namespace, error) {
		n.mu.Lock()
		n.closed, n.tunClosed = true, true
		n.mu.Unlock()
		unix.Close(tunFD) // nsFD is the caller's to close
		return nil, err
	}
	v4 := []string{
		"link set lo up",
		fmt.Sprintf("link set %s mtu %d up", tunName, tunMTU),
		fmt.Sprintf("addr add %s dev %s", tunAddr4, tunName),
		fmt.Sprintf("route add default dev %s", tunName),
	}
	if err := runIP(ctx, ipPath, v4); err != nil {
		return fail(err)
	}
	if ipv6Enabled() {
		v6 := []string{
			fmt.Sprintf("addr add %s dev %s nodad", tunAddr6, tunName),
			fmt.Sprintf("route add ::/0 dev %s", tunName),
		}
		if err := runIP(ctx, ipPath, v6); err != nil {
			return fail(err)
		}
		if err := waitIPv6Ready(ctx); err != nil {
			return fail(err)
		}
	}
	return n, nil
}

// runIP runs ip's batch of commands in the calling thread's namespace.
func runIP(ctx context.Context, ipPath string, cmds []string) error {
	cmd := exec.CommandContext(ctx, ipPath, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("configure network namespace: %w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// ipv6Enabled reports whether the calling thread's namespace has IPv6 on
// for new interfaces (a container runtime may have turned it off).
func ipv6Enabled() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + tunName + "/disable_ipv6")
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

// otherInterfaces lists the interfaces of a /proc/net/dev other than lo
// and the TUN device.
func otherInterfaces(dev []byte) []string {
	var out []string
	for _, line := range strings.Split(string(dev), "\n") {
		name, _, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.Contains(name, "|") || name == "lo" || name == tunName {
			continue
		}
		out = append(out, name)
	}
	return out
}

func lookIP() (string, error) {
	if p, err := exec.LookPath("ip"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("create network namespace: the ip command (iproute2) is not installed")
}

func newNamespaceLocked(ctx context.Context, ipPath string) (*Namespace, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("create network namespace: needs root or CAP_SYS_ADMIN and CAP_NET_ADMIN: %w", err)
		}
		return nil, fmt.Errorf("create network namespace: %w", err)
	}
	nsFD, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	tunFD, vnetHdr, err := openSessionTUN()
	if err != nil {
		unix.Close(nsFD)
		return nil, err
	}
	n := &Namespace{nsFD: nsFD, tunFD: tunFD, vnetHdr: vnetHdr}
	// Children of a locked thread start in its namespace, so ip configures
	// this one.
	script := strings.Join([]string{
		"link set lo up",
		fmt.Sprintf("link set %s mtu %d up", tunName, tunMTU),
		fmt.Sprintf("addr add %s dev %s", tunAddr4, tunName),
		fmt.Sprintf("addr add %s dev %s nodad", tunAddr6, tunName),
		fmt.Sprintf("route add default dev %s", tunName),
		fmt.Sprintf("route add ::/0 dev %s", tunName),
	}, "\n") + "\n"
	cmd := exec.CommandContext(ctx, ipPath, "-batch", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		n.Close()
		return nil, fmt.Errorf("configure network namespace: %w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	if err := waitIPv6Ready(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// waitIPv6Ready waits until the kernel routes the TUN device's IPv6
// address to itself. The kernel adds that local route only once the
// device's link state has settled (its link watch can take up to a second);
// until then it may send from the address but drops what comes back to it,
// so a session's first IPv6 exchange would be lost. It runs on the thread
// that is in the namespace.
func waitIPv6Ready(ctx context.Context) error {
	// /proc/net/ipv6_route writes the destination as 32 hex digits and
	// the prefix length in hex: the address's own route is "<addr> 80".
	want := strings.ReplaceAll(tunAddr6.Addr().StringExpanded(), ":", "") + " 80 "
	start := time.Now()
	for {
		b, err := os.ReadFile("/proc/thread-self/net/ipv6_route")
		if err != nil {
			return fmt.Errorf("configure network namespace: read IPv6 routes: %w", err)
		}
		if strings.Contains(string(b), want) {
			return nil
		}
		if time.Since(start) > 5*time.Second {
			return errors.New("configure network namespace: the kernel did not route the TUN device's IPv6 address within 5 seconds")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// offloadTUN is whether NewNamespace asks for a virtio-net header and
// checksum offload; tests turn it off to run the engine as it runs where the
// kernel refuses them.
var offloadTUN = true

// errNoOffload is openTUN's answer when the device takes no virtio-net
// header or checksum offload; the device is closed.
var errNoOffload = errors.New("the TUN device takes no virtio-net header or checksum offload")

// openSessionTUN creates the session's TUN device in the calling thread's
// namespace: with a virtio-net header and checksum offload where the kernel
// takes them, else a plain one; the bool says which.
func openSessionTUN() (int, bool, error) {
	tunFD, err := openTUN(tunName, offloadTUN)
	vnetHdr := err == nil && offloadTUN
	if errors.Is(err, errNoOffload) {
		// A kernel (or a sandbox's emulated /dev/net/tun) without
		// virtio-net headers or checksum offload still gets a working
		// engine, only one that costs more per byte.
		tunFD, err = openTUN(tunName, false)
	}
	if err != nil {
		return -1, false, fmt.Errorf("create TUN device (is /dev/net/tun there?): %w", err)
	}
	return tunFD, vnetHdr, nil
}

// openTUN creates the TUN device name in the calling thread's namespace
// and returns its queue, non-blocking as the engine reads it, with a
// virtio-net header and checksum offload when offload is set (see
// tunLink). The descriptor is close-on-exec from the moment it exists: set
// afterwards (gVisor's tun.Open opens it without), a process another
// goroutine starts in between would inherit it, and with it the session's
// traffic and a way to write packets into its namespace.
func openTUN(name string, offload bool) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	tunOpened(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if offload {
		flags |= unix.IFF_VNET_HDR
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if offload && errors.Is(err, unix.EINVAL) {
			return -1, fmt.Errorf("%w: TUNSETIFF: %w", errNoOffload, err)
		}
		return -1, fmt.Errorf("TUNSETIFF: %w", err)
	}
	if offload {
		if err := setTUNOffload(fd); err != nil {
			// Closing the only queue of a device that is not persistent
			// removes it, so the name is free for the plain one.
			unix.Close(fd)
			return -1, fmt.Errorf("%w: %w", errNoOffload, err)
		}
	}
	return fd, nil
}

// Path is a path to the namespace usable with setns(2) or nsenter --net=,
// valid while n is open and this process runs.
func (n *Namespace) Path() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), n.nsFD)
}

// DNS is the nameserver address to put in the sandbox's resolv.conf. (The
// engine answers port 53 on every address; this is the one that looks right.)
func (n *Namespace) DNS() netip.Addr { return dnsAddr4 }

// ResolvConf is a resolv.conf naming the namespace's DNS addresses.
func (n *Namespace) ResolvConf() []byte {
	return fmt.Appendf(nil, "# written by outpost: the session's network policy answers DNS\nnameserver %s\nnameserver %s\noptions edns0 trust-ad\n", dnsAddr4, dnsAddr6)
}

// Start starts cmd inside the namespace. The caller waits for it as usual.
//
// The thread that forks cmd enters the namespace and goes back to the
// caller's before it serves other goroutines. It must not end instead: the
// kernel sends a child's parent-death signal (SysProcAttr.Pdeathsig, bwrap's
// --die-with-parent) when the thread that forked it ends, which would kill
// cmd at once.
func (n *Namespace) Start(cmd *exec.Cmd) error {
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return errors.New("start in network namespace: the namespace is closed")
	}
	done := make(chan error, 1)
	go func() { done <- onThreadIn(n.nsFD, cmd.Start) }()
	return <-done
}

// Do runs f on an OS thread inside the namespace. Sockets f opens belong to
// the namespace and keep working after f returns, from any goroutine. The
// thread goes back to its own namespace when f returns; start processes
// with Start, not from f.
func (n *Namespace) Do(f func() error) error {
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return errors.New("enter network namespace: the namespace is closed")
	}
	done := make(chan error, 1)
	go func() { done <- onThreadIn(n.nsFD, f) }()
	return <-done
}

// onThreadIn runs f on the calling goroutine's thread, locked to it, inside
// the network namespace nsFD (-1: f makes one with unshare), and then puts
// the thread back in the namespace it was in and unlocks it.
//
// The thread must not end instead, which the runtime does to a thread whose
// goroutine ends locked: the kernel sends a child's parent-death signal
// (SysProcAttr.Pdeathsig, which the worker sets on its remotes and bwrap)
// when the thread that forked it ends, and the runtime lends its threads to
// any goroutine, so ending one that earlier forked another session's remote
// would kill that remote. Only when the way back fails does the thread end
// with the goroutine, rather than take the namespace into other goroutines.
func onThreadIn(nsFD int, f func() error) error {
	runtime.LockOSThread()
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open the current network namespace: %w", err)
	}
	defer unix.Close(home)
	if nsFD >= 0 {
		if err := unix.Setns(nsFD, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			return fmt.Errorf("enter network namespace: %w", err)
		}
	}
	err = f()
	if unix.Setns(home, unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return err
}

// Close releases the namespace and its TUN device. Processes still inside
// keep the namespace alive but lose their route out. Close the engine
// serving n first; if it still runs, the TUN device goes when it stops
// (closing it under the engine's reads would let them reach whatever file
// reuses the descriptor).
func (n *Namespace) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	err := unix.Close(n.nsFD)
	if !n.served {
		n.tunClosed = true
		err = errors.Join(err, unix.Close(n.tunFD))
	}
	return err
}

// unserve is called by the engine once it no longer reads the TUN device.
func (n *Namespace) unserve() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.served = false
	if n.closed && !n.tunClosed {
		n.tunClosed = true
		unix.Close(n.tunFD)
	}
}
