package dist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// Cache-Control values: a build's files never change under their name,
// while the latest pointer moves whenever a newer build is published.
const (
	cacheImmutable = "public, max-age=31536000, immutable"
	cacheLatest    = "no-cache"
)

// maxLatestBytes bounds what is read of a latest pointer file.
const maxLatestBytes = 1024

// HandlerOptions configure a Handler. Zero values mean the documented
// default.
type HandlerOptions struct {
	// Dir, when set, is a directory in the layout (the output of `make
	// dist`). Its files win over the executable's build.
	Dir string
	// Executable is published as the build SelfID names for HostSuffix
	// when Dir lacks that build; "" means this process's executable (on
	// Linux /proc/self/exe, the running build even after an upgrade
	// replaced its file). Set NoSelf to publish only Dir.
	Executable string
	// SelfID is the id of Executable; "" means SelfID().
	SelfID string
	// NoSelf publishes only the files of Dir.
	NoSelf bool
	// Logger receives a debug line per file served; nil discards them.
	Logger *slog.Logger
}

// Handler serves the layout: GET and HEAD of a published name, the path
// with its prefix stripped (mount it with http.StripPrefix). Unknown names
// get a 404 JSON error; only names ParseName accepts are ever looked up, so
// no request reaches a file outside Dir.
type Handler struct {
	opts   HandlerOptions
	suffix string // the executable's platform suffix; "" when not published
	hashes *hashCache
}

// NewHandler returns a Handler of opts.
func NewHandler(opts HandlerOptions) (*Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, hashes: newHashCache()}
	if opts.Dir != "" {
		fi, err := os.Stat(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("distribution directory: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("distribution directory %s is not a directory", opts.Dir)
		}
	}
	if opts.NoSelf {
		return h, nil
	}
	h.suffix = HostSuffix()
	if h.suffix == "" {
		return h, nil // no published name for this platform
	}
	if h.opts.Executable == "" {
		exe, err := executable()
		if err != nil {
			return nil, fmt.Errorf("find this executable to publish it: %w", err)
		}
		h.opts.Executable = exe
	}
	if h.opts.SelfID == "" {
		id, err := SelfID()
		if err != nil {
			return nil, err
		}
		h.opts.SelfID = id
	}
	if err := CheckID(h.opts.SelfID); err != nil {
		return nil, err
	}
	return h, nil
}

// ServeHTTP answers GET and HEAD of one published name (r.URL.Path).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "The distribution answers only GET and HEAD.")
		return
	}
	name, ok := ParseName(r.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("No such file in the distribution: %q. Files are latest_<platform>, devin-remote_<id>_<platform> and devin-remote_<id>_<platform>.sha256, for the platforms %s.",
				r.URL.Path, strings.Join(Suffixes, ", ")))
		return
	}
	var err error
	switch name.Kind {
	case KindLatest:
		err = h.serveLatest(w, r, name.Suffix)
	case KindBinary:
		err = h.serveBinary(w, r, name)
	default:
		err = h.serveChecksum(w, r, name)
	}
	var ne *notFoundError
	switch {
	case err == nil:
		h.opts.Logger.Debug("distribution file served", "name", r.URL.Path, "method", r.Method, "remote_addr", r.RemoteAddr)
	case errors.As(err, &ne):
		writeError(w, http.StatusNotFound, api.CodeNotFound, ne.msg)
	case errors.Is(err, fs.ErrNotExist):
		// Removed between the lookup and the open.
		writeError(w, http.StatusNotFound, api.CodeNotFound, "This distribution file is not published here.")
	default:
		h.opts.Logger.Error("serve distribution file", "name", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "The server cannot read this distribution file; see its log.")
	}
}

// notFoundError is a 404 with a sentence for the client.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &notFoundError{fmt.Sprintf(format, args...)}
}

// serveLatest answers the id of the newest build of suffix: Dir's pointer
// file (trimmed), else the executable's id for its own platform.
func (h *Handler) serveLatest(w http.ResponseWriter, r *http.Request, suffix string) error {
	var id string
	var mod time.Time
	names := []string{LatestName(suffix)}
	if strings.HasSuffix(suffix, exeSuffix) {
		names = append(names, LatestName(strings.TrimSuffix(suffix, exeSuffix)))
	}
	for _, n := range names {
		b, fi, err := h.readDirFile(n, maxLatestBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		id = strings.TrimSpace(string(b))
		if !ValidID(id) {
			return fmt.Errorf("%s holds %q, which is not a version id", filepath.Join(h.opts.Dir, n), truncate(id, 60))
		}
		mod = fi.ModTime()
		break
	}
	if id == "" {
		if suffix != h.suffix {
			return notFound("No build for %s is published here.", suffix)
		}
		id = h.opts.SelfID
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("Cache-Control", cacheLatest)
	hd.Set("ETag", `"`+id+`"`)
	http.ServeContent(w, r, "", mod, strings.NewReader(id))
	return nil
}

// build is one published binary found for a request.
type build struct {
	id    string // its canonical id (the request may name a prefix)
	path  string
	inDir bool
}

// findBuild finds the binary of the build id names for suffix: Dir's file
// of that id, else Dir's one file whose id is the same (SameID), else the
// executable.
func (h *Handler) findBuild(id, suffix string) (build, error) {
	if h.opts.Dir != "" {
		exact := BinaryName(id, suffix)
		if fi, err := os.Stat(filepath.Join(h.opts.Dir, exact)); err == nil && fi.Mode().IsRegular() {
			return build{id: id, path: filepath.Join(h.opts.Dir, exact), inDir: true}, nil
		}
		entries, err := os.ReadDir(h.opts.Dir)
		if err != nil {
			return build{}, fmt.Errorf("read distribution directory: %w", err)
		}
		var ids []string
		for _, e := range entries {
			if n, ok := ParseName(e.Name()); ok && n.Kind == KindBinary && n.Suffix == suffix && SameID(n.ID, id) {
				ids = append(ids, n.ID)
			}
		}
		switch len(ids) {
		case 1:
			return build{id: ids[0], path: filepath.Join(h.opts.Dir, BinaryName(ids[0], suffix)), inDir: true}, nil
		case 0:
		default:
			slices.Sort(ids)
			return build{}, notFound("The id %s names several builds for %s (%s); give more of its digits.", id, suffix, strings.Join(ids, ", "))
		}
	}
	if suffix == h.suffix && SameID(id, h.opts.SelfID) {
		return build{id: h.opts.SelfID, path: h.opts.Executable}, nil
	}
	return build{}, notFound("Build %s for %s is not published here.", id, suffix)
}

func (h *Handler) serveBinary(w http.ResponseWriter, r *http.Request, n Name) error {
	b, err := h.findBuild(n.ID, n.Suffix)
	if err != nil {
		return err
	}
	f, fi, err := openRegular(b.path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum, err := h.hashes.sum(b.path, f, fi)
	if err != nil {
		return fmt.Errorf("hash %s: %w", b.path, err)
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Cache-Control", cacheImmutable)
	hd.Set("ETag", `"`+sum+`"`)
	http.ServeContent(w, r, "", fi.ModTime(), io.NewSectionReader(f, 0, fi.Size()))
	return nil
}

// serveChecksum answers Dir's check line file of the build as it is, or
// else the check line of the binary's SHA-256.
func (h *Handler) serveChecksum(w http.ResponseWriter, r *http.Request, n Name) error {
	b, err := h.findBuild(n.ID, n.Suffix)
	if err != nil {
		return err
	}
	var body []byte
	var mod time.Time
	if b.inDir {
		raw, fi, err := h.readDirFile(ChecksumName(b.id, n.Suffix), maxLatestBytes)
		switch {
		case err == nil:
			body, mod = raw, fi.ModTime()
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
	}
	if body == nil {
		f, fi, err := openRegular(b.path)
		if err != nil {
			return err
		}
		defer f.Close()
		sum, err := h.hashes.sum(b.path, f, fi)
		if err != nil {
			return fmt.Errorf("hash %s: %w", b.path, err)
		}
		body, mod = []byte(CheckLine(sum, n.Suffix)), fi.ModTime()
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("Cache-Control", cacheImmutable)
	http.ServeContent(w, r, "", mod, bytes.NewReader(body))
	return nil
}

// readDirFile reads at most limit bytes of Dir's regular file name;
// fs.ErrNotExist when there is no Dir or no such file.
func (h *Handler) readDirFile(name string, limit int64) ([]byte, os.FileInfo, error) {
	if h.opts.Dir == "" {
		return nil, nil, fs.ErrNotExist
	}
	f, fi, err := openRegular(filepath.Join(h.opts.Dir, name))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, nil, err
	}
	return b, fi, nil
}

// openRegular opens a regular file; fs.ErrNotExist for anything else.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file: %w", path, fs.ErrNotExist)
	}
	return f, fi, nil
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.NewErrorResponse(code, msg))
}
