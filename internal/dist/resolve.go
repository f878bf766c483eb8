package dist

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Timeouts of the Resolver's requests.
const (
	latestTimeout   = 30 * time.Second
	checksumTimeout = 30 * time.Second
	binaryTimeout   = 10 * time.Minute
)

// maxBinaryBytes bounds a downloaded binary.
const maxBinaryBytes = 1 << 30

// ResolverOptions configure a Resolver. Zero values mean the documented
// default.
type ResolverOptions struct {
	// BaseURL is where the layout is published, e.g.
	// "https://outpost.example.com/dist/". Empty means nothing is
	// fetched: only this build can serve, and a pin of another build fails.
	BaseURL string
	// CacheDir holds downloaded remotes (CacheDir/remote/<id>_<platform>/).
	// Required when BaseURL is set.
	CacheDir string
	// Pin is the id to run when a session pins none (the worker's
	// --remote-binary-sha); empty means the latest published build.
	Pin string
	// Self is the command that runs this build as a remote, e.g.
	// [outpost, "remote", "serve"]. Required.
	Self []string
	// SelfID is this build's id; empty means SelfID().
	SelfID string
	// Suffix is the platform to fetch; empty means HostSuffix().
	Suffix string
	// HTTPClient fetches; nil means a client of its own. No credentials
	// are sent: the distribution is public.
	HTTPClient *http.Client
	// Logger receives what was resolved and downloaded; nil discards it.
	Logger *slog.Logger
	// LatestMaxAge is how long the latest build's id, once read, is used
	// without reading it again; zero reads it at every Resolve that needs
	// it. A build published meanwhile serves the sessions resolved after
	// that age. Refresh reads it ahead of a Resolve.
	LatestMaxAge time.Duration
}

// Resolver turns a session's pin into the command of the remote to run:
// this build itself, or a build downloaded from the distribution, verified
// against its SHA-256 and kept in a cache. It is safe for concurrent use,
// also by several processes sharing one cache directory.
type Resolver struct {
	opts ResolverOptions
	base *url.URL // nil when nothing is fetched

	warnLatest sync.Once

	mu       sync.Mutex         // guards the following
	verified map[string]fileKey // cached binaries already hashed, by path
	latestID string             // the latest build's id as last read; "" none
	latestAt time.Time          // when latestID was read
}

// fileKey identifies a file's content cheaply: a cached binary is hashed
// again only when it changed.
type fileKey struct {
	size int64
	mod  time.Time
}

// NewResolver checks opts and returns a Resolver.
func NewResolver(opts ResolverOptions) (*Resolver, error) {
	if len(opts.Self) == 0 {
		return nil, errors.New("dist: ResolverOptions.Self is required")
	}
	if opts.Pin != "" {
		if err := CheckID(opts.Pin); err != nil {
			return nil, fmt.Errorf("remote binary sha: %w", err)
		}
	}
	if opts.SelfID == "" {
		id, err := SelfID()
		if err != nil {
			return nil, err
		}
		opts.SelfID = id
	}
	if opts.Suffix == "" {
		opts.Suffix = HostSuffix()
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Resolver{opts: opts, verified: map[string]fileKey{}}
	if opts.BaseURL != "" {
		u, err := url.Parse(opts.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("static base URL %q must be an absolute http:// or https:// URL", opts.BaseURL)
		}
		if !strings.HasSuffix(u.Path, "/") {
			u.Path += "/"
		}
		u.RawQuery, u.Fragment = "", ""
		r.base = u
		if opts.CacheDir == "" {
			return nil, errors.New("dist: ResolverOptions.CacheDir is required with a BaseURL")
		}
	}
	return r, nil
}

// SelfID is the id of the build that runs as Self.
func (r *Resolver) SelfID() string { return r.opts.SelfID }

// Resolve returns the command of the remote to run for a session pinning
// pin ("" when it pins none). The id is the session's pin, else the
// Resolver's Pin, else the latest published build. When it names this build
// the command is Self; otherwise the build is downloaded (or taken from the
// cache), verified and its command returned: <cache>/…/devin-remote serve.
//
// When nothing is pinned and the latest pointer cannot be fetched, the
// command is Self (a warning is logged once). A pinned build that cannot be
// fetched or whose SHA-256 does not match is an error that names the id,
// the URL and, for a mismatch, both hashes.
func (r *Resolver) Resolve(ctx context.Context, pin string) ([]string, error) {
	id, source := pin, "session pin"
	if id == "" {
		id, source = r.opts.Pin, "worker default (--remote-binary-sha)"
	}
	if id != "" {
		if err := CheckID(id); err != nil {
			return nil, fmt.Errorf("the %s: %w", source, err)
		}
	}
	if id == "" {
		latest, err := r.latestRecent(ctx)
		if err != nil {
			r.warnLatest.Do(func() {
				r.opts.Logger.Warn("cannot read the latest remote build; running this build's remote (warned once)",
					"err", err, "self_id", r.opts.SelfID)
			})
			return r.opts.Self, nil
		}
		id, source = latest, "latest"
	}
	if SameID(id, r.opts.SelfID) {
		r.opts.Logger.Debug("remote resolved to this build", "id", r.opts.SelfID, "source", source)
		return r.opts.Self, nil
	}
	if r.base == nil {
		return nil, fmt.Errorf("remote build %s (%s) is not this build (%s), and no static base URL is set to download it from", id, source, r.opts.SelfID)
	}
	if r.opts.Suffix == "" {
		return nil, fmt.Errorf("remote build %s (%s) cannot be downloaded: the distribution has no platform for this machine", id, source)
	}
	path, err := r.fetch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("remote build %s (%s): %w", id, source, err)
	}
	return []string{path, "serve"}, nil
}

// urlOf returns the URL of a published name.
func (r *Resolver) urlOf(name string) string {
	return r.base.ResolveReference(&url.URL{Path: name}).String()
}

// latestRecent is the latest build's id as read within LatestMaxAge, else
// as read now.
func (r *Resolver) latestRecent(ctx context.Context) (string, error) {
	if r.opts.LatestMaxAge > 0 {
		r.mu.Lock()
		id, at := r.latestID, r.latestAt
		r.mu.Unlock()
		if id != "" && time.Since(at) < r.opts.LatestMaxAge {
			return id, nil
		}
	}
	return r.readLatest(ctx)
}

// Refresh reads the latest build's id now, for the Resolves of the next
// LatestMaxAge: a worker calls it while idle, so that a claim does not
// wait for the read. It does nothing when LatestMaxAge is zero or a Pin
// is set, and a failed read changes nothing.
func (r *Resolver) Refresh(ctx context.Context) {
	if r.opts.LatestMaxAge <= 0 || r.opts.Pin != "" || r.base == nil {
		return
	}
	_, _ = r.readLatest(ctx)
}

// readLatest reads the latest build's id and keeps it for latestRecent.
func (r *Resolver) readLatest(ctx context.Context) (string, error) {
	at := time.Now()
	id, err := r.latest(ctx)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	if at.After(r.latestAt) {
		r.latestID, r.latestAt = id, at
	}
	r.mu.Unlock()
	return id, nil
}

// latest reads the id of the newest build for the platform.
func (r *Resolver) latest(ctx context.Context) (string, error) {
	if r.base == nil {
		return "", errors.New("no static base URL is set")
	}
	if r.opts.Suffix == "" {
		return "", errors.New("the distribution has no platform for this machine")
	}
	u := r.urlOf(LatestName(r.opts.Suffix))
	ctx, cancel := context.WithTimeout(ctx, latestTimeout)
	defer cancel()
	b, err := r.get(ctx, u, maxLatestBytes)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if !ValidID(id) {
		return "", fmt.Errorf("GET %s answered %q, which is not a version id", u, truncate(id, 60))
	}
	return id, nil
}

// get fetches u, failing on any answer but 200 and on bodies over limit.
func (r *Resolver) get(ctx context.Context, u string, limit int64) ([]byte, error) {
	resp, err := r.do(ctx, u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("GET %s: the answer is larger than %d bytes", u, limit)
	}
	return b, nil
}

// do sends GET u and returns a 200 answer.
func (r *Resolver) do(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return resp, nil
}
