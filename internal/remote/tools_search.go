package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
)

func init() {
	tools[api.ToolApplyPatch] = runApplyPatch
	tools[api.ToolGlob] = runGlob
	tools[api.ToolGrep] = runGrep
}

const (
	// maxGlobMatches bounds glob's result.
	maxGlobMatches = 1000
	// defaultGrepMatches and maxGrepMatches bound grep's result.
	defaultGrepMatches = 200
	maxGrepMatches     = 10000
	// maxGrepFile is the largest file grep searches.
	maxGrepFile = 1 << 20
	// maxGrepLine is how much of a matching line grep returns.
	maxGrepLine = 500
)

func runApplyPatch(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ApplyPatchArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if strings.TrimSpace(a.Patch) == "" {
		return nil, errors.New("bad arguments: patch must not be empty")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, errors.New("apply_patch needs git, which is not on PATH: install git (e.g. apt-get install git, brew install git)")
	}
	patch := a.Patch
	if !strings.HasSuffix(patch, "\n") {
		patch += "\n"
	}
	f, err := os.CreateTemp("", "outpost-patch-*.diff")
	if err != nil {
		return nil, fmt.Errorf("apply_patch: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(patch)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("apply_patch: %w", err)
	}
	strip := "-p1"
	if !gitStylePaths(patch) {
		strip = "-p0"
	}
	// git apply works relative to the top of a work tree it finds above its
	// directory; the ceiling keeps it to the workspace. Without a work tree
	// it acts like patch(1) and refuses paths outside the workspace. It
	// applies all of a patch or nothing.
	gitApply := func(extra ...string) (string, error) {
		args := append([]string{"apply", strip, "--whitespace=nowarn"}, extra...)
		cmd := exec.CommandContext(ctx, git, append(args, f.Name())...)
		cmd.Dir = c.workDir
		cmd.Env = mergeEnv(c.env, map[string]string{"GIT_CEILING_DIRECTORIES": filepath.Dir(c.workDir)})
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	// Hunk headers written by hand often miscount lines: then count again.
	// (Not at once: without diff --git lines, a "--- " line after a hunk
	// reads as a removal when counting.)
	recount := false
	list, err := gitApply("--numstat", "-z")
	if err != nil && ctx.Err() == nil {
		if list2, rerr := gitApply("--recount", "--numstat", "-z"); rerr == nil {
			list, err, recount = list2, nil, true
		}
	}
	if err != nil {
		return nil, fmt.Errorf("apply_patch: the patch is not a valid unified diff; nothing was changed: %s", strings.TrimSpace(list))
	}
	files := numstatFiles(list)
	if len(files) == 0 {
		return nil, errors.New("apply_patch: the patch changes no file; nothing was changed")
	}
	var out string
	if recount {
		out, err = gitApply("--recount")
	} else if out, err = gitApply(); err != nil && ctx.Err() == nil {
		if _, rerr := gitApply("--recount"); rerr == nil {
			err = nil
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.New("cancelled")
		}
		return nil, fmt.Errorf("apply_patch: the patch does not apply; nothing was changed: %s", strings.TrimSpace(out))
	}
	return api.ApplyPatchResult{Files: files}, nil
}

// gitStylePaths reports whether the patch's file headers carry a/ and b/
// prefixes (or /dev/null), as git diff writes them.
func gitStylePaths(patch string) bool {
	seen := false
	for line := range strings.Lines(patch) {
		if strings.HasPrefix(line, "diff --git ") {
			return true
		}
		var p string
		switch {
		case strings.HasPrefix(line, "--- "):
			p = line[4:]
		case strings.HasPrefix(line, "+++ "):
			p = line[4:]
		default:
			continue
		}
		p, _, _ = strings.Cut(strings.TrimRight(p, "\r\n"), "\t")
		if p == "/dev/null" {
			continue
		}
		if !strings.HasPrefix(p, "a/") && !strings.HasPrefix(p, "b/") {
			return false
		}
		seen = true
	}
	return seen
}

// numstatFiles parses the paths out of git apply --numstat -z: each entry
// is "added\tdeleted\tpath\0", or, for a rename, "added\tdeleted\t\0old\0new\0".
func numstatFiles(out string) []string {
	var files []string
	fields := strings.Split(out, "\x00")
	for i := 0; i < len(fields); i++ {
		parts := strings.SplitN(fields[i], "\t", 3)
		if len(parts) < 3 {
			continue
		}
		if parts[2] != "" {
			files = append(files, parts[2])
			continue
		}
		for k := 1; k <= 2 && i+k < len(fields); k++ {
			if fields[i+k] != "" {
				files = append(files, fields[i+k])
			}
		}
		i += 2
	}
	slices.Sort(files)
	return slices.Compact(files)
}

func runGlob(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.GlobArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Pattern == "" {
		return nil, errors.New("bad arguments: pattern must not be empty")
	}
	pat := filepath.ToSlash(a.Pattern)
	base := c.workDir
	if path.IsAbs(pat) {
		base = "/"
	}
	segs := globSegments(pat)
	for _, s := range segs {
		if _, err := path.Match(s, ""); err != nil {
			return nil, fmt.Errorf("bad arguments: pattern %q: %w", a.Pattern, err)
		}
	}
	g := &globber{ctx: ctx, base: base, seen: map[string]bool{}}
	g.walk("", segs)
	if ctx.Err() != nil {
		return nil, errors.New("cancelled")
	}
	res := api.GlobResult{Matches: g.matches}
	if len(res.Matches) > maxGlobMatches {
		res.Matches, res.Truncated = res.Matches[:maxGlobMatches], true
	}
	slices.Sort(res.Matches)
	if res.Matches == nil {
		res.Matches = []string{}
	}
	return res, nil
}

// globSegments splits a slash pattern into its non-empty elements.
func globSegments(pat string) []string {
	var segs []string
	for s := range strings.SplitSeq(pat, "/") {
		if s != "" && s != "." {
			segs = append(segs, s)
		}
	}
	return segs
}

// globber walks a directory tree for a segmented pattern.
type globber struct {
	ctx     context.Context
	base    string // the directory rel paths start from
	seen    map[string]bool
	matches []string // rel paths (absolute when base is "/")
}

func (g *globber) full(rel string) string {
	return filepath.Join(g.base, filepath.FromSlash(rel))
}

func (g *globber) add(rel string) {
	if rel == "" || g.seen[rel] {
		return
	}
	g.seen[rel] = true
	out := rel
	if g.base == "/" {
		out = "/" + rel
	}
	g.matches = append(g.matches, out)
}

func (g *globber) done() bool {
	return len(g.matches) > maxGlobMatches || g.ctx.Err() != nil
}

// walk matches segs against what is under rel (a directory).
func (g *globber) walk(rel string, segs []string) {
	if g.done() {
		return
	}
	if len(segs) == 0 {
		g.add(rel)
		return
	}
	seg := segs[0]
	if seg == "**" {
		g.walk(rel, segs[1:]) // no directory at all
		entries, err := os.ReadDir(g.full(rel))
		if err != nil {
			return
		}
		for _, e := range entries {
			if g.done() {
				return
			}
			child := path.Join(rel, e.Name())
			if e.Name() == ".git" {
				continue // only a pattern naming .git enters it
			}
			if len(segs) == 1 {
				g.add(child) // a final ** matches everything beneath
			}
			if e.IsDir() { // symlinks are not followed by **
				g.walk(child, segs)
			}
		}
		return
	}
	if !hasMeta(seg) {
		child := path.Join(rel, seg)
		st, err := os.Stat(g.full(child))
		if err != nil {
			return
		}
		if len(segs) == 1 {
			g.add(child)
		} else if st.IsDir() {
			g.walk(child, segs[1:])
		}
		return
	}
	entries, err := os.ReadDir(g.full(rel))
	if err != nil {
		return
	}
	for _, e := range entries {
		if g.done() {
			return
		}
		if ok, _ := path.Match(seg, e.Name()); !ok {
			continue
		}
		if e.Name() == ".git" {
			continue // only a pattern naming .git enters it
		}
		child := path.Join(rel, e.Name())
		if len(segs) == 1 {
			g.add(child)
			continue
		}
		if st, err := os.Stat(g.full(child)); err == nil && st.IsDir() {
			g.walk(child, segs[1:])
		}
	}
}

func hasMeta(s string) bool {
	return strings.ContainsAny(s, `*?[\`)
}

// globMatch reports whether the slash path name matches pattern, with **
// matching any number of elements.
func globMatch(pattern, name string) bool {
	return matchSegs(globSegments(pattern), globSegments(name))
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegs(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

func runGrep(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.GrepArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Pattern == "" {
		return nil, errors.New("bad arguments: pattern must not be empty")
	}
	if a.MaxMatches < 0 {
		return nil, errors.New("bad arguments: max_matches must not be negative")
	}
	limit := a.MaxMatches
	if limit == 0 {
		limit = defaultGrepMatches
	}
	limit = min(limit, maxGrepMatches)
	expr := a.Pattern
	if a.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("bad arguments: pattern: %w", err)
	}
	if a.Include != "" {
		for _, s := range globSegments(filepath.ToSlash(a.Include)) {
			if _, err := path.Match(s, ""); err != nil {
				return nil, fmt.Errorf("bad arguments: include %q: %w", a.Include, err)
			}
		}
	}
	root := c.path(a.Path)
	if _, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("grep: %w", err)
	}
	res := api.GrepResult{Matches: []api.GrepMatch{}}
	errStop := errors.New("stop")
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return nil // unreadable: skip
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if a.Include != "" && !includeMatch(a.Include, root, p) {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > maxGrepFile {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) > maxGrepFile || isBinary(b) || !re.Match(b) {
			return nil
		}
		name := p
		if rel, err := filepath.Rel(c.workDir, p); err == nil && filepath.IsLocal(rel) {
			name = filepath.ToSlash(rel)
		}
		n := 0
		for line := range bytes.Lines(b) {
			n++
			line = bytes.TrimRight(line, "\r\n")
			if !re.Match(line) {
				continue
			}
			if len(res.Matches) == limit {
				res.Truncated = true
				return errStop
			}
			res.Matches = append(res.Matches, api.GrepMatch{File: name, Line: n, Text: cutLine(line)})
		}
		return nil
	})
	switch {
	case ctx.Err() != nil:
		return res, errors.New("cancelled")
	case err != nil && !errors.Is(err, errStop):
		return res, fmt.Errorf("grep: %w", err)
	}
	return res, nil
}

// includeMatch applies grep's include glob to the file p found under root:
// against its base name, or, when the glob has a '/', its path under root.
func includeMatch(include, root, p string) bool {
	include = filepath.ToSlash(include)
	if !strings.Contains(include, "/") {
		ok, _ := path.Match(include, filepath.Base(p))
		return ok
	}
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return globMatch(include, filepath.ToSlash(rel))
}

// cutLine returns line as valid UTF-8 text of at most maxGrepLine bytes.
func cutLine(line []byte) string {
	if len(line) > maxGrepLine {
		cut := maxGrepLine
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		return strings.ToValidUTF8(string(line[:cut]), "\uFFFD") + "…"
	}
	return strings.ToValidUTF8(string(line), "\uFFFD")
}
