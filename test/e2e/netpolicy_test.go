//go:build linux

package e2e

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

const (
	// binaryEnv hands a re-executed test binary the outpost build.
	binaryEnv = "OUTPOST_E2E_BINARY"
	// privateNetnsEnv says the test binary runs in the network and mount
	// namespaces TestNetworkPolicy made for it.
	privateNetnsEnv = "OUTPOST_E2E_PRIVATE_NETNS"
	// The test hosts' namespace and the test's own, on a veth pair.
	hostsAddr = "10.77.0.2"
	ourAddr   = "10.77.0.1"
)

// TestNetworkPolicy runs restricted sessions through a real server and
// real workers, against test hosts in a network namespace of the test's
// own. The whole test (server, workers, hosts) runs in a private network
// and mount namespace: the test binary re-executes itself there under
// `unshare`, with a hosts file that names the test hosts bound over
// /etc/hosts, so nothing touches the machine's own network.
//
// A worker without isolation never claims the restricted session; a
// bwrap worker serves it: its exec calls reach the allowed name, and not
// a refused name, a raw address, a UDP echo or another DNS server, each
// refusal a network event of the transcript; a policy PATCH mid-session
// lets the refused name through within the session.
func TestNetworkPolicy(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test makes network namespaces, and restricted sessions need them")
	}
	if os.Getenv(privateNetnsEnv) == "" {
		reexecInPrivateNetns(t)
		return
	}
	hosts := startTestHosts(t)
	c := startCluster(t)
	// The run-as user of user isolation must reach the binary.
	if err := os.Chmod(filepath.Dir(binary), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("bwrap", func(t *testing.T) { restrictedSession(t, c, hosts, workerEnforcer("bwrap", true)) })
	t.Run("user", func(t *testing.T) { restrictedSession(t, c, hosts, workerEnforcer("user", false)) })
	t.Run("docker", func(t *testing.T) { restrictedSession(t, c, hosts, dockerEnforcer(t)) })
	t.Run("enabled-while-running", func(t *testing.T) { policyEnabledWhileRunning(t, c) })
	t.Run("orchestrate", func(t *testing.T) { orchestratedRestricted(t, c) })
}

// orchestratedRestricted: `outpost orchestrate --backend process` never
// claims a restricted session; `--backend bwrap` serves it behind its
// policy.
func orchestratedRestricted(t *testing.T, c *cluster) {
	outpost := "netpol-orch"
	token := setupOutpost(t, c, outpost)
	open := startOrchestrator(t, c, outpost, token, t.TempDir(), "--backend", "process")
	waitfor.Within(t, 30*time.Second, "the process orchestrator to start", func() bool {
		return strings.Contains(open.out.String(), "orchestrator ready")
	})
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: outpost, Title: "orchestrated network policy",
		NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.test"}}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep(`out=$(curl -s --max-time 10 http://allowed.test/) && echo "allowed=$out" || echo allowed=refused`),
			execStep(`curl -s --max-time 10 -o /dev/null http://denied.test/ && echo denied=reached || echo denied=refused`),
		}},
	})
	waitfor.Within(t, 30*time.Second, "the session in the queue", func() bool {
		var e api.QueueEntry
		return c.api("GET", "/v1/queue/"+id, c.admin, nil, &e) == 200 && e.Spec.NetworkPolicy != nil
	})
	sandboxed := startOrchestrator(t, c, outpost, token, t.TempDir(), "--backend", "bwrap")
	s := c.waitFinal(id, 90*time.Second)
	out := sessionOutput(t, c, id)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s\n%s\n%s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason, out, sandboxed.out.String())
	}
	for _, want := range []string{"allowed=hello allowed.test", "denied=refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("the session printed no %q:\n%s", want, out)
		}
	}
	if strings.Contains(open.out.String(), `msg="claimed session" session=`+id) {
		t.Errorf("the process orchestrator claimed the restricted session:\n%s", open.out.String())
	}
	waitfor.Within(t, 30*time.Second, "the denial in the transcript", func() bool {
		for _, ev := range c.events(id) {
			if ev.Type == api.EventNetwork && ev.Decision == api.DecisionDeny && ev.Host == "denied.test" {
				return true
			}
		}
		return false
	})
}

// netWorker starts a worker of outpost with the given isolation (and a
// run-as user for user isolation).
func netWorker(t *testing.T, c *cluster, outpost, token, name, isolation string) *proc {
	t.Helper()
	work := sharedTempDir(t, name)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir(),
		"OUTPOST_SERVER=" + c.url, "OUTPOST_TOKEN=" + token}
	args := []string{"worker", "start", "--outpost", outpost, "--dir", work, "--data-dir", filepath.Join(sharedTempDir(t, name+"-data"), "data"),
		"--isolation", isolation, "--log-level", "debug"}
	if isolation == "user" {
		args = append(args, "--run-as", dedicatedUser(t).Username)
	}
	return startExact(t, name, env, work, args...)
}

// enforcer is what serves a restricted session in restrictedSession.
type enforcer struct {
	name string
	// withOpen also runs an unisolated worker on the outpost first, which
	// must leave the session alone.
	withOpen bool
	start    func(t *testing.T, c *cluster, outpost, token string) *proc
	// fetch is a shell command that prints the body of http://HOST:PORT/
	// and fails when there is none, within secs seconds.
	fetch func(host, port string, secs int) string
	// after runs once the session has ended and its decisions are in.
	after func(t *testing.T, id string)
}

// vsockProbe tries to open an AF_VSOCK socket: vsock=refused when a
// filter says "permission denied" (a machine without vsock says something
// else: vsock=other).
const vsockProbe = `if command -v python3 >/dev/null; then python3 -c '
import socket
try:
    socket.socket(40, socket.SOCK_STREAM)
    print("vsock=open")
except PermissionError:
    print("vsock=refused")
except OSError as e:
    print("vsock=other", e)
'; else echo vsock=untested; fi`

// curlFetch fetches with curl, which the workers' host has.
func curlFetch(host, port string, secs int) string {
	return fmt.Sprintf(`curl -s --max-time %d http://%s:%s/`, secs, host, port)
}

// workerEnforcer is a worker of the given isolation.
func workerEnforcer(isolation string, withOpen bool) enforcer {
	return enforcer{name: isolation, withOpen: withOpen, fetch: curlFetch,
		start: func(t *testing.T, c *cluster, outpost, token string) *proc {
			return netWorker(t, c, outpost, token, "worker-"+isolation, isolation)
		}}
}

// restrictedSession runs a restricted session's probes behind e.
func restrictedSession(t *testing.T, c *cluster, hosts *testHosts, e enforcer) {
	isolation := e.name
	outpost := "netpol-" + isolation
	token := setupOutpost(t, c, outpost)
	var open *proc
	if e.withOpen {
		open = netWorker(t, c, outpost, token, "worker-none", "none")
		waitfor.Within(t, 30*time.Second, "the unisolated worker to leave restricted sessions to others", func() bool {
			return strings.Contains(open.out.String(), "sessions with a network policy are left to other workers")
		})
	}
	udp0, dns0 := hosts.udp.Load(), hosts.dns.Load()
	live := `for i in $(seq 1 100); do ` + e.fetch("denied.test", "80", 2) + ` >/dev/null && { echo live=reached; exit 0; }; sleep 0.3; done; echo live=never`
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: outpost, Title: "network policy " + isolation,
		NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.test"}}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep(`out=$(` + e.fetch("allowed.test", "80", 10) + `) && echo "allowed=$out" || echo allowed=refused`),
			execStep(e.fetch("denied.test", "80", 10) + ` >/dev/null && echo denied=reached || echo denied=refused`),
			execStep(e.fetch(hostsAddr, "8080", 10) + ` >/dev/null && echo raw=reached || echo raw=refused`),
			execStep(`bash -c 'exec 3<>/dev/udp/` + hostsAddr + `/9999; echo ping >&3; if read -t 3 l <&3; then echo udp=reached; else echo udp=refused; fi'`),
			execStep(`bash -c 'exec 3<>/dev/udp/` + hostsAddr + `/53; printf "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06denied\x04test\x00\x00\x01\x00\x01" >&3; read -t 3 -N 2 r <&3; echo dns=asked'`),
			execStep(`getent hosts nothere.test >/dev/null && echo lookup=resolved || echo lookup=refused`),
			// AF_VSOCK reaches a VM's host from any namespace: the remote's
			// filter refuses the socket itself. (Images without python3
			// say so instead.)
			execStep(vsockProbe),
			execStep(live),
		}},
	})
	if e.withOpen {
		// The unisolated worker has had the session in its queue.
		waitfor.Within(t, 30*time.Second, "the session in the queue", func() bool {
			var e api.QueueEntry
			return c.api("GET", "/v1/queue/"+id, c.admin, nil, &e) == 200 && e.Spec.NetworkPolicy != nil
		})
	}
	enforcing := e.start(t, c, outpost, token)
	waitfor.Within(t, 90*time.Second, "the session's probes to run", func() bool {
		return strings.Contains(sessionOutput(t, c, id), "dns=asked")
	})
	patch := api.UpdateSessionRequest{NetworkPolicy: &api.NetworkPolicy{Enabled: true,
		Allow: []api.NetworkPolicyRule{{Hostname: "allowed.test"}, {Hostname: "denied.test"}}}}
	if code := c.api("PATCH", "/v1/sessions/"+id, c.admin, patch, nil); code != 200 {
		t.Fatalf("PATCH the session's policy: %d", code)
	}
	s := c.waitFinal(id, 90*time.Second)
	out := sessionOutput(t, c, id)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s\n%s\n%s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason, out, enforcing.out.String())
	}
	wants := []string{"allowed=hello allowed.test", "denied=refused", "raw=refused", "udp=refused", "dns=asked", "lookup=refused", "live=reached"}
	if e.fetch != nil && strings.HasPrefix(e.fetch("h", "1", 1), "curl") {
		wants = append(wants, "vsock=refused") // the worker's host has python3
	}
	if strings.Contains(out, "vsock=open") || strings.Contains(out, "vsock=other") {
		t.Errorf("a vsock socket was not refused by the filter:\n%s", out)
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("the session printed no %q:\n%s", want, out)
		}
	}
	if n := hosts.udp.Load() - udp0; n != 0 {
		t.Errorf("the UDP echo got %d datagrams", n)
	}
	if n := hosts.dns.Load() - dns0; n != 0 {
		t.Errorf("the test hosts' DNS server got %d queries: a session reached another DNS server", n)
	}
	if open != nil && strings.Contains(open.out.String(), `msg="claimed session" session=`+id) {
		t.Errorf("the unisolated worker claimed the restricted session:\n%s", open.out.String())
	}
	// The last decisions reach the transcript as the worker closes the
	// session's engine, just after the session ends.
	kinds := []string{"allowed", "denied", "raw", "udp", "dns", "lookup", "live"}
	found := map[string]bool{}
	waitfor.Within(t, 30*time.Second, "every decision in the transcript", func() bool {
		for _, ev := range c.events(id) {
			if ev.Type != api.EventNetwork {
				continue
			}
			switch {
			case ev.Decision == api.DecisionAllow && ev.Host == "allowed.test" && ev.Port == 80 && ev.BytesIn > 0:
				found["allowed"] = true
			case ev.Decision == api.DecisionDeny && ev.Host == "denied.test" && ev.Protocol == api.ProtocolTCP:
				found["denied"] = true
			case ev.Decision == api.DecisionDeny && ev.Address == hostsAddr && ev.Port == 8080:
				found["raw"] = true
			case ev.Decision == api.DecisionDeny && ev.Protocol == api.ProtocolUDP && ev.Port == 9999:
				found["udp"] = true
			case ev.Decision == api.DecisionDeny && ev.Protocol == api.ProtocolDNS && ev.Host == "denied.test":
				found["dns"] = true
			case ev.Decision == api.DecisionDeny && ev.Protocol == api.ProtocolDNS && ev.Host == "nothere.test":
				// Through the namespace's resolv.conf (bwrap) or the relay
				// at the host's loopback nameserver (user).
				found["lookup"] = true
			case ev.Decision == api.DecisionAllow && ev.Host == "denied.test" && ev.Protocol == api.ProtocolTCP:
				found["live"] = true
			}
		}
		return len(found) == len(kinds)
	})
	if e.after != nil {
		e.after(t, id)
	}
	if t.Failed() {
		t.Logf("the enforcer's log:\n%s", tail(enforcing.out.String(), 6000))
	}
}

// policyEnabledWhileRunning: an open session whose policy is enabled
// while it runs loses its remote, which ran outside any namespace, with
// the reason, and its next remote runs behind the policy. (The call the
// stopped remote was running is cancelled, which ends a script session;
// what matters here is that nothing more runs open.)
func policyEnabledWhileRunning(t *testing.T, c *cluster) {
	outpost := "netpol-later"
	token := setupOutpost(t, c, outpost)
	w := netWorker(t, c, outpost, token, "worker-later", "bwrap")
	wait := `for i in $(seq 1 300); do curl -s --max-time 1 -o /dev/null http://denied.test/ || { echo blocked=yes; exit 0; }; echo open; sleep 0.2; done; echo blocked=never`
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: outpost, Title: "policy enabled while running",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep(wait)}},
	})
	waitfor.Within(t, 60*time.Second, "the open session to reach the host", func() bool {
		return strings.Contains(sessionOutput(t, c, id), "open")
	})
	patch := api.UpdateSessionRequest{NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.test"}}}}
	if code := c.api("PATCH", "/v1/sessions/"+id, c.admin, patch, nil); code != 200 {
		t.Fatalf("PATCH the session's policy: %d", code)
	}
	waitfor.Within(t, 60*time.Second, "the worker to stop the open remote", func() bool {
		return strings.Contains(w.out.String(), "network policy was enabled while it ran without one")
	})
	waitfor.Within(t, 60*time.Second, "the session's remote to start again behind the policy", func() bool {
		return strings.Count(w.out.String(), `msg="remote started" session=`+id) == 2 &&
			strings.Contains(w.out.String(), "network_policy=true")
	})
	s := c.waitFinal(id, 90*time.Second)
	t.Logf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	if strings.Contains(sessionOutput(t, c, id), "blocked=never") {
		t.Errorf("the session ran on open:\n%s", sessionOutput(t, c, id))
	}
}

// reexecInPrivateNetns runs this test again in a new network and mount
// namespace (loopback up, /etc/hosts naming the test hosts) and fails
// with its output when it fails.
func reexecInPrivateNetns(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("no unshare: %v", err)
	}
	orig, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	hostsFile := filepath.Join(t.TempDir(), "hosts")
	names := fmt.Sprintf("%s allowed.test denied.test\n", hostsAddr)
	if err := os.WriteFile(hostsFile, append(orig, names...), 0o644); err != nil {
		t.Fatal(err)
	}
	// A loopback nameserver, as systemd-resolved's stub: a session that
	// reads the host's resolv.conf (user isolation) must still get its
	// DNS answered, by the engine.
	resolvFile := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolvFile, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `ip link set lo up && mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/resolv.conf && shift && exec "$@"`
	run := "^TestNetworkPolicy$"
	if f := flag.Lookup("test.run"); f != nil && strings.HasPrefix(f.Value.String(), run+"/") {
		run = f.Value.String() // a subtest asked for
	}
	cmd := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, hostsFile, resolvFile,
		os.Args[0], "-test.run", run, "-test.v", "-test.timeout", "280s")
	cmd.Env = append(os.Environ(), privateNetnsEnv+"=1", binaryEnv+"="+binary)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNetworkPolicy") {
		t.Fatalf("TestNetworkPolicy in its private namespaces: %v\n%s", err, out)
	}
	t.Logf("in its private namespaces:\n%s", tail(string(out), 4000))
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// testHosts are the servers in the test hosts' namespace, with what they
// received.
type testHosts struct {
	udp, dns atomic.Int64
}

// startTestHosts makes a network namespace for the test hosts (held by a
// sleeping process), joins it to the test's own by a veth pair and starts
// there: HTTP on port 80 (named allowed.test and denied.test in the hosts
// file) answering "hello HOST", HTTP on 8080, a UDP echo on 9999 and a
// DNS server on 53 that only counts queries.
func startTestHosts(t *testing.T) *testHosts {
	holder := exec.Command("unshare", "--net", "sleep", "3600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	pid := fmt.Sprint(holder.Process.Pid)
	nsPath := "/proc/" + pid + "/ns/net"
	waitfor.Within(t, 10*time.Second, "the hosts' namespace", func() bool {
		a, _ := os.Readlink(nsPath)
		b, _ := os.Readlink("/proc/self/ns/net")
		return a != "" && a != b
	})
	for _, args := range [][]string{
		{"ip", "link", "add", "veth-test", "type", "veth", "peer", "name", "veth-hosts", "netns", pid},
		{"ip", "addr", "add", ourAddr + "/24", "dev", "veth-test"},
		{"ip", "link", "set", "veth-test", "up"},
		{"nsenter", "--net=" + nsPath, "ip", "addr", "add", hostsAddr + "/24", "dev", "veth-hosts"},
		{"nsenter", "--net=" + nsPath, "ip", "link", "set", "veth-hosts", "up"},
		{"nsenter", "--net=" + nsPath, "ip", "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	h := &testHosts{}
	serveHTTP := func(port string, body func(r *http.Request) string) {
		ln := listenIn(t, nsPath, func() (io.Closer, error) { return net.Listen("tcp", net.JoinHostPort(hostsAddr, port)) }).(net.Listener)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body(r)) })}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
	}
	serveHTTP("80", func(r *http.Request) string { return "hello " + r.Host })
	serveHTTP("8080", func(*http.Request) string { return "raw" })
	serveUDP := func(port string, count *atomic.Int64, echo bool) {
		pc := listenIn(t, nsPath, func() (io.Closer, error) { return net.ListenPacket("udp", net.JoinHostPort(hostsAddr, port)) }).(net.PacketConn)
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				count.Add(1)
				if echo {
					_, _ = pc.WriteTo(buf[:n], from)
				}
			}
		}()
	}
	serveUDP("9999", &h.udp, true)
	serveUDP("53", &h.dns, false)
	// The test's side reaches them directly, so a refusal below is the
	// policy's, not the test network's.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + hostsAddr + ":8080/")
	if err != nil {
		t.Fatalf("the test hosts are not reachable from the test: %v", err)
	}
	resp.Body.Close()
	return h
}

// listenIn runs listen on a thread in the network namespace at nsPath;
// the socket stays there.
func listenIn(t *testing.T, nsPath string, listen func() (io.Closer, error)) io.Closer {
	t.Helper()
	type result struct {
		c   io.Closer
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Locked and never unlocked: the thread ends with the goroutine,
		// never serving another in the hosts' namespace.
		runtime.LockOSThread()
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{nil, err}
			return
		}
		c, err := listen()
		done <- result{c, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("listen in the hosts' namespace: %v", r.err)
	}
	return r.c
}
