package worker

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
)

// gatewayServer is the HTTP side of a gateway as a direct-serve worker sees
// it: api.GatewaySessionPath answers the pin of session sess-d to the
// connect token ct-direct, and /dist/ publishes a dist dir when one is set.
type gatewayServer struct {
	srv    *httptest.Server
	pin    string
	status int // of the session answer; 0 means 200
	asked  atomic.Int32
	dist   http.Handler
}

func newGatewayServer(t *testing.T, pin string) *gatewayServer {
	t.Helper()
	gs := &gatewayServer{pin: pin}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.GatewaySessionPath, func(w http.ResponseWriter, r *http.Request) {
		gs.asked.Add(1)
		switch {
		case gs.status != 0:
			replyErr(w, gs.status, "refused")
		case r.Header.Get("Authorization") != "Bearer ct-direct" || r.Header.Get(api.HeaderSessionID) != "sess-d":
			replyErr(w, http.StatusUnauthorized, "The connect token is not valid.")
		default:
			out := api.GatewaySession{SessionID: "sess-d"}
			if gs.pin != "" {
				out.RemoteBinarySHA = &gs.pin
			}
			reply(w, http.StatusOK, out)
		}
	})
	mux.HandleFunc("GET /dist/", func(w http.ResponseWriter, r *http.Request) {
		if gs.dist == nil {
			http.NotFound(w, r)
			return
		}
		http.StripPrefix("/dist/", gs.dist).ServeHTTP(w, r)
	})
	gs.srv = httptest.NewServer(mux)
	t.Cleanup(gs.srv.Close)
	return gs
}

func (gs *gatewayServer) gatewayURL() string {
	return "ws" + strings.TrimPrefix(gs.srv.URL, "http") + api.GatewayPath
}

// ranAs is what the remote of a direct-serve run left in its data dir:
// "<id> devin-remote serve" for a downloaded build, "self" for this one.
func ranAs(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "ran.txt"))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestServeDirectPinnedBuild: direct-serve runs the session's pin — the one
// its claimer passed, else the one the gateway's server tells the connect
// token — downloaded from the static base URL, else from the server's
// /dist/ (the one given, else the gateway's), verified and cached; with no
// pin, or a server too old to say, this build serves.
func TestServeDirectPinnedBuild(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	const good, tampered = "00000000900d", "00000000bad0"
	builds := writeBuilds(t, good, tampered)
	other := httptest.NewServer(http.StripPrefix("/dist/", distHandler(t, builds)))
	t.Cleanup(other.Close)
	otherBase := other.URL + "/dist/"
	const self = `echo self > "$OUTPOST_STATE_DIR/../../ran.txt"`

	for _, tc := range []struct {
		name                  string
		claimerPin, serverPin string
		serverStatus          int
		static, server        string // StaticBaseURL, ServerURL
		gatewayDist           bool
		want                  string
		asked                 int32
	}{
		{name: "claimer's pin, static base URL", claimerPin: good, serverPin: tampered, static: otherBase, want: good + " devin-remote serve"},
		{name: "server's pin, static base URL", serverPin: good, static: otherBase, want: good + " devin-remote serve", asked: 1},
		{name: "server's pin, given server's dist", serverPin: good, server: other.URL, want: good + " devin-remote serve", asked: 1},
		{name: "server's pin, gateway's dist", serverPin: good, gatewayDist: true, want: good + " devin-remote serve", asked: 1},
		{name: "no pin", static: otherBase, want: "self", asked: 1},
		{name: "server too old to say", serverStatus: http.StatusNotFound, want: "self", asked: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gs := newGatewayServer(t, tc.serverPin)
			gs.status = tc.serverStatus
			if tc.gatewayDist {
				gs.dist = distHandler(t, builds)
			}
			opts := directOptions(t, self)
			opts.GatewayURL, opts.RemoteBinarySHA, opts.StaticBaseURL, opts.ServerURL = gs.gatewayURL(), tc.claimerPin, tc.static, tc.server
			ctx, _ := testContext(t)
			if err := ServeDirect(ctx, opts); err != nil {
				t.Fatalf("ServeDirect = %v", err)
			}
			if got := ranAs(t, opts.DataDir); got != tc.want {
				t.Errorf("remote ran as %q, want %q", got, tc.want)
			}
			if n := gs.asked.Load(); n != tc.asked {
				t.Errorf("the server was asked for the pin %d times, want %d", n, tc.asked)
			}
			if tc.want != "self" {
				if _, err := os.Stat(dist.CachedPath(filepath.Join(opts.DataDir, "cache"), good, dist.HostSuffix())); err != nil {
					t.Errorf("cached build: %v", err)
				}
			}
		})
	}
}

// TestServeDirectRefusesBuild: a pinned build that does not match its
// check line, or is not published, or a pin the server will not tell,
// starts nothing, with an error naming the pin and the URL.
func TestServeDirectRefusesBuild(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	const good, tampered, missing = "00000000900d", "00000000bad0", "00000000dead"
	base := publishBuilds(t, good, tampered)
	for _, tc := range []struct {
		name, pin string
		status    int
		want      []string
	}{
		{"tampered", tampered, 0, []string{tampered, base + dist.BinaryName(tampered, dist.HostSuffix()), "refusing to run it", "SHA-256 ", " says "}},
		{"not published", missing, 0, []string{missing, base + dist.ChecksumName(missing, dist.HostSuffix()), "404"}},
		{"token refused", "", http.StatusUnauthorized, []string{api.GatewaySessionPath, "401", "refused", api.EnvWorkerRemoteSHA.Public}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gs := newGatewayServer(t, tc.pin)
			gs.status = tc.status
			opts := directOptions(t, `echo self > "$OUTPOST_STATE_DIR/../../ran.txt"`)
			opts.GatewayURL, opts.StaticBaseURL = gs.gatewayURL(), base
			ctx, _ := testContext(t)
			err := ServeDirect(ctx, opts)
			if !errors.Is(err, errStart) {
				t.Fatalf("ServeDirect = %v, want a start error", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if got := ranAs(t, opts.DataDir); got != "" {
				t.Errorf("a remote ran: %q", got)
			}
			if tc.pin != "" {
				if _, err := os.Stat(dist.CachedPath(filepath.Join(opts.DataDir, "cache"), tc.pin, dist.HostSuffix())); !os.IsNotExist(err) {
					t.Errorf("the refused build is in the cache: %v", err)
				}
			}
		})
	}
}

// TestServeDirectUnpinnedRunsLatest: a directly served session that pins
// nothing runs the latest build published at the static base URL, when one
// is set, as the docs promise, and this build when none is.
func TestServeDirectUnpinnedRunsLatest(t *testing.T) {
	t.Parallel()
	requireUnix(t)
	const good, tampered = "00000000900d", "00000000bad0"
	builds := writeBuilds(t, good, tampered)
	if err := os.WriteFile(filepath.Join(builds, dist.LatestName(dist.HostSuffix())), []byte(good+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	published := httptest.NewServer(http.StripPrefix("/dist/", distHandler(t, builds)))
	t.Cleanup(published.Close)
	for static, want := range map[string]string{published.URL + "/dist/": good + " devin-remote serve", "": "self"} {
		gs := newGatewayServer(t, "")
		gs.dist = distHandler(t, builds) // the gateway's /dist/ is no default for an unpinned session
		opts := directOptions(t, `echo self > "$OUTPOST_STATE_DIR/../../ran.txt"`)
		opts.GatewayURL, opts.StaticBaseURL = gs.gatewayURL(), static
		ctx, _ := testContext(t)
		if err := ServeDirect(ctx, opts); err != nil {
			t.Fatalf("static base URL %q: ServeDirect = %v", static, err)
		}
		if got := ranAs(t, opts.DataDir); got != want {
			t.Errorf("static base URL %q: remote ran as %q, want %q", static, got, want)
		}
	}
}

// TestServeDirectRelativeCacheDir: a cache dir given relative to the
// working directory names the same dir for the download and for the start
// of the remote, which runs in another directory (the workspace), and not
// a dir of the workspace's.
func TestServeDirectRelativeCacheDir(t *testing.T) {
	requireUnix(t)
	const good, tampered = "00000000900d", "00000000bad0"
	published := httptest.NewServer(http.StripPrefix("/dist/", distHandler(t, writeBuilds(t, good, tampered))))
	t.Cleanup(published.Close)
	cwd := t.TempDir()
	t.Chdir(cwd)
	gs := newGatewayServer(t, good)
	opts := directOptions(t, `echo self > "$OUTPOST_STATE_DIR/../../ran.txt"`)
	opts.GatewayURL, opts.StaticBaseURL, opts.CacheDir = gs.gatewayURL(), published.URL+"/dist/", "cache"
	ctx, _ := testContext(t)
	if err := ServeDirect(ctx, opts); err != nil {
		t.Fatalf("ServeDirect = %v", err)
	}
	if got, want := ranAs(t, opts.DataDir), good+" devin-remote serve"; got != want {
		t.Errorf("remote ran as %q, want %q", got, want)
	}
	if _, err := os.Stat(dist.CachedPath(filepath.Join(cwd, "cache"), good, dist.HostSuffix())); err != nil {
		t.Errorf("the build is not cached under the working directory: %v", err)
	}
}
