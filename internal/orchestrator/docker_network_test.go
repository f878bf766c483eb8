package orchestrator

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netguard"
	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// Documentation addresses (RFC 5737) the restricted container tries: the
// engine never dials them, the guard's Dial answers for them with the
// test's servers on the host's loopback, and records what it was asked.
const (
	allowedDest = "198.51.100.7" // allowed by an address rule, TCP port 80
	deniedDest  = "198.51.100.8" // no rule
)

// dockerProbe is run by bash in the restricted container; it prints
// key=value facts, then END, and waits to be torn down.
const dockerProbe = `
get() { # host port: the first line of an HTTP/1.0 answer, or refused
  timeout 8 bash -c 'exec 3<>/dev/tcp/$0/$1 && printf "GET / HTTP/1.0\r\nHost: $0\r\n\r\n" >&3 && tail -n1 <&3' "$1" "$2" 2>/dev/null || echo refused
}
echo "netns=$(readlink /proc/self/ns/net)"
echo "resolv=$(grep -m1 '^nameserver' /etc/resolv.conf)"
(echo "nameserver 192.0.2.53" > /etc/resolv.conf) 2>/dev/null && echo resolvwrite=written || echo resolvwrite=refused
echo "capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)"
echo "gateway=$(get 127.0.0.1 GATEWAY_PORT)"
echo "allowed=$(get ` + allowedDest + ` 80)"
echo "denied=$(get ` + deniedDest + ` 80)"
echo "otherport=$(get ` + allowedDest + ` 8080)"
echo "ipv6=$(get 2001:db8::7 80)"
getent hosts denied.example.test >/dev/null && echo name=resolved || echo name=refused
echo "udp=$(timeout 4 bash -c 'exec 3<>/dev/udp/` + allowedDest + `/7 && echo ping >&3 && dd bs=512 count=1 <&3 2>/dev/null' 2>/dev/null || echo refused)"
echo "dns=$(timeout 4 bash -c 'exec 3<>/dev/udp/` + deniedDest + `/53 && printf "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06denied\x07example\x04test\x00\x00\x01\x00\x01" >&3 && dd bs=512 count=1 <&3 2>/dev/null | od -An -tx1 | tr -d " \n"' 2>/dev/null || echo none)"
echo END
exec sleep 300
`

// dests are the test's servers standing in for the documentation
// addresses, and the destinations the guard was asked to dial.
type dests struct {
	mu     sync.Mutex
	dialed []string
	http   string // an HTTP server that answers "allowed"
	udp    string // a UDP echo
}

func (d *dests) dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, network+" "+address)
	d.mu.Unlock()
	var nd net.Dialer
	switch {
	case strings.HasPrefix(network, "udp"):
		return nd.DialContext(ctx, network, d.udp)
	case address == allowedDest+":80":
		return nd.DialContext(ctx, network, d.http)
	}
	return nil, fmt.Errorf("the test dials only %s:80, not %s", allowedDest, address)
}

func (d *dests) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string{}, d.dialed...)
}

func needNetworkEnforcement(t *testing.T, b *DockerBackend) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the guard enters the container's network namespace")
	}
	if _, err := b.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.EnforcesNetwork(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the docker backend cannot enforce network policies here: %v", err)
		}
		t.Skipf("the docker backend cannot enforce network policies here: %v", err)
	}
}

// TestDockerRestrictedContainer: a restricted session's container runs in
// a namespace its guard serves: it reaches the gateway on the host's
// loopback and what the policy allows, and not another address, another
// port, an IPv6 address, UDP, a name the policy does not allow, nor
// another nameserver; it
// cannot rewrite its resolv.conf and lacks NET_ADMIN and NET_RAW. Teardown
// leaves neither the container nor its namespace's holder.
func TestDockerRestrictedContainer(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, DockerOptions{Outpost: "netunit"})
	needNetworkEnforcement(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "gateway\n")
	}))
	defer gateway.Close()
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "allowed\n") }))
	defer allowed.Close()
	echo, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = echo.WriteTo(buf[:n], from)
		}
	}()
	d := &dests{http: allowed.Listener.Addr().String(), udp: echo.LocalAddr().String()}
	_, gwPort, _ := net.SplitHostPort(gateway.Listener.Addr().String())

	s := shellSpec(t, strings.ReplaceAll(dockerProbe, "GATEWAY_PORT", gwPort))
	s.Remote = []string{"/bin/sh", "-c", `exec bash -c "$0"`, s.Remote[2]}
	s.Env = []string{"OUTPOST_GATEWAY_URL=" + gateway.URL, "OUTPOST_CONNECT_TOKEN=t", "OUTPOST_SESSION_ID=" + s.SessionID}
	if err := os.MkdirAll(s.Workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	path, err := b.NetworkNamespace(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	resolv := filepath.Join(s.Workspace, "resolv.conf")
	var rec decisions
	g, err := netguard.Start(ctx, netguard.Options{Session: s.SessionID, GatewayURL: gateway.URL, ResolvConf: resolv, Namespace: path,
		Policy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{
			{IPv4: allowedDest + "/32", Ports: []int{80}}, {Hostname: "allowed.example.test"}}},
		Dial: d.dial, Report: rec.report})
	if err != nil {
		_ = b.Teardown(ctx, s)
		t.Fatal(err)
	}
	defer g.Close()
	s.Network, s.ResolvConf = g, resolv
	if _, err := b.Provision(ctx, s); err != nil {
		_ = b.Teardown(ctx, s)
		t.Fatal(err)
	}
	torn := false
	defer func() {
		if !torn {
			_ = b.Teardown(context.Background(), s)
		}
	}()
	if got := podmantest.Containers(t, LabelSession+"="+s.SessionID); len(got) != 2 {
		t.Errorf("containers of the session: %v, want the machine and its namespace's holder", got)
	}
	// Podman leaves NET_ADMIN and NET_RAW out by default, Docker keeps
	// NET_RAW (and inspect shows only what differs from the defaults): the
	// drop is asked for whatever the runtime's defaults.
	var hc container.HostConfig
	if err := b.restrict(s, &hc); err != nil {
		t.Fatal(err)
	}
	for _, c := range restrictedCapDrop {
		if !slices.Contains(hc.CapDrop, c) {
			t.Errorf("a restricted container's dropped capabilities %v lack %s", hc.CapDrop, c)
		}
	}
	info, err := b.cli.ContainerInspect(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.HostConfig.NetworkMode.IsContainer() {
		t.Errorf("the container's network mode is %q, not its holder's", info.HostConfig.NetworkMode)
	}
	f := containerFacts(t, s.Name, 60*time.Second)

	nsOut, err := exec.Command("readlink", "/proc/self/ns/net").Output()
	if err != nil {
		t.Fatal(err)
	}
	if hostNS := strings.TrimSpace(string(nsOut)); !strings.HasPrefix(f["netns"], "net:") || f["netns"] == hostNS {
		t.Errorf("the container's network namespace %q is the orchestrator's (%s)", f["netns"], hostNS)
	}
	for k, want := range map[string]string{
		"resolv": "nameserver 10.254.0.1", "resolvwrite": "refused", "gateway": "gateway",
		"allowed": "allowed", "denied": "refused", "otherport": "refused", "ipv6": "refused", "name": "refused", "udp": "refused",
	} {
		if got := strings.TrimSpace(strings.TrimSuffix(f[k], "\r")); got != want {
			t.Errorf("%s = %q, want %q", k, f[k], want)
		}
	}
	// The nameserver the program chose is answered by the engine, which
	// knows no address for a name the policy does not allow.
	if ans := f["dns"]; len(ans) < 24 || !strings.HasPrefix(ans, "1234") || ans[12:16] != "0000" {
		t.Errorf("another nameserver's answer for a denied name = %q, want the engine's, with no answer records", ans)
	}
	capEff, err := strconv.ParseUint(f["capeff"], 16, 64)
	if err != nil {
		t.Fatalf("capeff %q: %v", f["capeff"], err)
	}
	const capNetAdmin, capNetRaw = 12, 13
	if capEff&(1<<capNetAdmin|1<<capNetRaw) != 0 {
		t.Errorf("the container's effective capabilities %#x include NET_ADMIN or NET_RAW", capEff)
	}
	for _, dl := range d.list() {
		if dl != "tcp "+allowedDest+":80" {
			t.Errorf("the guard dialed %s, which the policy does not allow", dl)
		}
	}
	waitfor.Until(ctx, t, "the denials reported", func() bool {
		return rec.has(api.DecisionDeny, deniedDest) && rec.has(api.DecisionAllow, allowedDest)
	})

	if err := b.Teardown(ctx, s); err != nil {
		t.Fatal(err)
	}
	torn = true
	if got := podmantest.Containers(t, LabelSession+"="+s.SessionID); len(got) != 0 {
		t.Errorf("containers left after teardown: %v", got)
	}
	b.mu.Lock()
	left := len(b.holders)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d namespaces still held after teardown", left)
	}
}

// TestDockerRefusesWithoutEnforcement: before Check, and for a daemon
// that is not on this machine's socket, the backend says why it cannot
// enforce a policy, and the orchestrator refuses restricted sessions.
func TestDockerRefusesWithoutEnforcement(t *testing.T) {
	t.Parallel()
	b, err := NewDockerBackend(DockerOptions{Image: testImage, Host: "tcp://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.EnforcesNetwork(); err == nil || !strings.Contains(err.Error(), "not checked") {
		t.Errorf("before Check: %v", err)
	}
	o := &orchestrator{opts: Options{Backend: b}}
	if err := o.networkEnforcement(); err == nil {
		t.Error("the orchestrator would claim restricted sessions for an unchecked docker backend")
	}
	err = b.checkNetwork(context.Background())
	if err == nil {
		t.Fatal("a daemon over tcp:// can enforce network policies")
	}
	if os.Geteuid() == 0 && !strings.Contains(err.Error(), "not a local socket") {
		t.Errorf("the reason %q does not say the daemon is remote", err)
	}
	if strings.Count(err.Error(), ". ") > 0 {
		t.Errorf("the reason is not one sentence: %q", err)
	}
}

// TestDockerAdoptRefusesJoinedNamespace: after a restart the orchestrator
// does not adopt a container that joined another's network namespace: its
// guard ended with the previous run.
func TestDockerAdoptRefusesJoinedNamespace(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, DockerOptions{Outpost: "netunit"})
	needNetworkEnforcement(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := shellSpec(t, `exec sleep 300`)
	s.Acceptor = "acc-" + s.SessionID
	if err := os.MkdirAll(s.Workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	path, err := b.NetworkNamespace(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	resolv := filepath.Join(s.Workspace, "resolv.conf")
	g, err := netguard.Start(ctx, netguard.Options{Session: s.SessionID, GatewayURL: "http://127.0.0.1:1", ResolvConf: resolv, Namespace: path,
		Policy: &api.NetworkPolicy{Enabled: true}})
	if err != nil {
		_ = b.Teardown(ctx, s)
		t.Fatal(err)
	}
	s.Network, s.ResolvConf = g, resolv
	if _, err := b.Provision(ctx, s); err != nil {
		g.Close()
		_ = b.Teardown(ctx, s)
		t.Fatal(err)
	}
	g.Close() // the previous run ends
	// A restarted orchestrator: a new backend, the same daemon.
	b2 := newTestBackend(t, DockerOptions{Host: b.Host(), Outpost: "netunit"})
	ids, err := b2.Leftovers(ctx, s.Acceptor)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) == 0 || slices.ContainsFunc(ids, func(id string) bool { return id != s.SessionID }) {
		t.Errorf("leftovers of the acceptor = %v, want the session %s (its machine and its holder)", ids, s.SessionID)
	}
	if _, ok := b2.Adopt(ctx, s); ok {
		t.Error("adopted a container whose network namespace's guard is gone")
	}
	if err := b2.Teardown(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := podmantest.Containers(t, LabelSession+"="+s.SessionID); len(got) != 0 {
		t.Errorf("containers left after teardown by a restarted orchestrator: %v", got)
	}
	_ = b.Teardown(ctx, s) // closes the first backend's handle; nothing left to remove
}

// containerFacts polls the container's output until it printed END and
// returns its key=value lines.
func containerFacts(t *testing.T, name string, within time.Duration) map[string]string {
	t.Helper()
	var out []byte
	waitfor.Within(t, within, "the container's facts", func() bool {
		out, _ = exec.Command("podman", "logs", name).CombinedOutput()
		return strings.Contains(string(out), "END")
	})
	f := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			f[k] = strings.TrimSpace(v)
		}
	}
	t.Logf("facts: %v", f)
	return f
}

// decisions keeps the guard's reports.
type decisions struct {
	mu  sync.Mutex
	all []api.NetworkDecision
}

func (r *decisions) report(_ context.Context, b []api.NetworkDecision) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, b...)
	return nil
}

func (r *decisions) has(decision, addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.all {
		if d.Decision == decision && d.Address == addr {
			return true
		}
	}
	return false
}

// BenchmarkDockerProvision measures Provision of an open machine and of a
// restricted one (holder, guard, container in the holder's namespace),
// teardown excluded.
func BenchmarkDockerProvision(b *testing.B) {
	be := newTestBackend(b, DockerOptions{Outpost: "bench"})
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	if _, err := be.Check(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := be.EnforcesNetwork(); err != nil {
		b.Skipf("no network enforcement here: %v", err)
	}
	ctx := context.Background()
	const script = `trap 'exit 0' TERM; sleep 300 & wait`
	for _, restricted := range []bool{false, true} {
		name := "open"
		if restricted {
			name = "restricted"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				s := shellSpec(b, script)
				var g *netguard.Guard
				if restricted {
					if err := os.MkdirAll(s.Workspace, 0o700); err != nil {
						b.Fatal(err)
					}
					path, err := be.NetworkNamespace(ctx, s)
					if err != nil {
						b.Fatal(err)
					}
					resolv := filepath.Join(s.Workspace, "resolv.conf")
					g, err = netguard.Start(ctx, netguard.Options{Session: s.SessionID, GatewayURL: "http://127.0.0.1:1", ResolvConf: resolv,
						Namespace: path, Policy: &api.NetworkPolicy{Enabled: true}})
					if err != nil {
						b.Fatal(err)
					}
					s.Network, s.ResolvConf = g, resolv
				}
				if _, err := be.Provision(ctx, s); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := be.Teardown(ctx, s); err != nil {
					b.Fatal(err)
				}
				if g != nil {
					g.Close()
				}
				b.StartTimer()
			}
		})
	}
}
